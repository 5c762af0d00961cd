"""An elastic job on a real server and dockerd: it starts at its minimum beside another
job, and once that job ends it is restarted on more GPUs; its events say so, and its
container learns its size from ``GPUDOCK_GPUS`` and ``WORLD_SIZE``."""

from __future__ import annotations

from typing import Any

import pytest
from docker.errors import NotFound
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker


def container_env(docker: Any, instance: str, job_id: int) -> dict[str, str] | None:
    """The env of job ``job_id``'s running container, or None while it has none."""
    labels = [f"gpudock.instance={instance}", f"gpudock.job={job_id}"]
    for summary in docker.api.containers(filters={"label": labels}):
        try:
            env = docker.api.inspect_container(summary["Id"])["Config"]["Env"]
        except NotFound:
            continue
        return dict(e.split("=", 1) for e in env)
    return None


def test_an_elastic_job_starts_at_2_and_is_restarted_on_4_when_gpus_free_up(
    make_server: Any, docker: Any
) -> None:
    server = make_server(emulate="4xH100-80GB", config=FAST_CONFIG)
    server.start(wait=False)
    server.wait_healthy(timeout=120)
    api = server.api()
    instance = api.get("/healthz").json()["instance"]
    refused = api.post("/v1/jobs", json={"image": TEST_IMAGE, "min_gpus": 4, "max_gpus": 2})
    assert refused.status_code == 422
    assert refused.json()["error"]["message"].endswith(
        "min_gpus (4) must not be greater than max_gpus (2)"
    )
    other = submit(api, image=TEST_IMAGE, command=["sleep", "6"], gpus=2)
    wait_state(api, other, {"RUNNING"})
    elastic = submit(api, image=TEST_IMAGE, command=["sleep", "300"], gpus="2-4", elastic="restart")
    wait_state(api, elastic, {"RUNNING"})
    first = job_state(api, elastic)
    assert len(first["gpus"]) == 2 and first["attempt"] == 0
    env = wait_for(lambda: container_env(docker, instance, elastic), 30, "the first container")
    assert (len(env["GPUDOCK_GPUS"].split(",")), env["WORLD_SIZE"]) == (2, "2")

    wait_state(api, other, {"SUCCEEDED"}, timeout=60)
    grown = wait_for(
        lambda: (lambda j: j if j["state"] == "RUNNING" and j["attempt"] == 1 else None)(
            job_state(api, elastic)
        ),
        90,
        "the elastic job to run again",
    )
    assert len(grown["gpus"]) == 4
    assert (grown["spec"]["gpus"], grown["spec"]["max_gpus"]) == (2, 4)
    env = wait_for(
        lambda: (lambda e: e if e and e.get("WORLD_SIZE") == "4" else None)(
            container_env(docker, instance, elastic)
        ),
        30,
        "the grown container",
    )
    assert sorted(env["GPUDOCK_GPUS"].split(",")) == sorted(grown["gpus"])

    events = api.get("/v1/events", params={"job": elastic, "limit": 100}).json()["events"]
    kinds = [e["payload"]["to"] if e["type"] == "job.state" else e["type"] for e in events]
    assert kinds == [
        "PENDING", "job.placed", "ALLOCATED", "STARTING", "RUNNING",
        "job.resized", "PENDING", "job.placed", "ALLOCATED", "STARTING", "RUNNING",
    ]  # fmt: skip
    resized = events[5]
    assert resized["payload"] == {"from": 2, "to": 4} and resized["node"]
    assert "grow from 2 to 4 GPUs; no retry used" in events[6]["payload"]["reason"]
    assert len(events[7]["payload"]["gpus"]) == 4
