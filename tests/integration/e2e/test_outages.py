"""Docker outages and out-of-band changes: the server stays up and converges."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.proxy import SocketRelay
from tests.kit.server import FAST_CONFIG, ServerProcess, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker
DONE = {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}


def test_docker_down_keeps_the_server_up_and_work_resumes(make_server: Any, tmp_path: Path) -> None:
    relay = SocketRelay(tmp_path / "docker.sock")
    relay.up()
    config = {**FAST_CONFIG, "executor": {"stop_grace": "2s", "docker_url": relay.url}}
    server = make_server(config=config).start()
    api = server.api()
    running = submit(api, image=TEST_IMAGE, command=["sleep", "3"], gpus=1)
    wait_state(api, running, {"RUNNING"})

    relay.down()
    node = wait_for(
        lambda: (n := api.get("/v1/nodes").json()[0])["status"] == "unavailable" and n,
        20,
        "the node to be marked unavailable",
    )
    assert node["status_reason"].startswith("Docker daemon unreachable")
    assert api.get("/healthz").status_code == 200
    queued = submit(api, image=TEST_IMAGE, command=["true"], gpus=1)
    reasons = wait_for(lambda: job_state(api, queued)["pending_reasons"], 20, "pending reason")
    assert reasons[0]["layer"] == "health" and "Docker daemon unreachable" in reasons[0]["message"]
    time.sleep(3.5)  # the first job's container finishes while we cannot see it
    assert job_state(api, running)["state"] == "RUNNING"

    relay.up()
    assert wait_state(api, queued, DONE)["state"] == "SUCCEEDED"
    assert wait_state(api, running, DONE)["state"] == "SUCCEEDED"
    assert api.get("/v1/nodes").json()[0]["status"] == "available"


def test_a_vanished_container_marks_the_job_lost_or_retries_it(
    server: ServerProcess, docker: Any
) -> None:
    api = server.api()
    lost = submit(api, image=TEST_IMAGE, command=["sleep", "60"], gpus=1)
    retried = submit(api, image=TEST_IMAGE, command=["sleep", "2"], gpus=1, retries=1)
    for job_id in (lost, retried):
        container = wait_state(api, job_id, {"RUNNING"})["container"]
        docker.api.remove_container(container, force=True)
    done = wait_state(api, lost, DONE)
    assert done["state"] == "LOST"
    assert "disappeared while the job was running" in done["reason"]
    again = wait_state(api, retried, DONE)
    assert (again["state"], again["attempt"]) == ("SUCCEEDED", 1)
    assert any("retrying (1 of 1 retries)" in (e["reason"] or "") for e in again["events"])


def test_containers_without_a_job_are_reported_and_stopped(
    server: ServerProcess, docker: Any
) -> None:
    api = server.api()
    instance = api.get("/healthz").json()["instance"]
    orphan = docker.containers.run(
        TEST_IMAGE,
        ["sleep", "300"],
        detach=True,
        init=True,
        name=f"gpudock-{instance}-4242-a0",
        labels={"gpudock.job": "4242", "gpudock.attempt": "0", "gpudock.instance": instance},
    )
    wait_for(
        lambda: not docker.api.containers(all=True, filters={"id": orphan.id}),
        30,
        "the orphan container to be removed",
    )
    assert "belongs to no active job" in server.log_path.read_text()


def test_emulated_gpus_on_docker_without_nvidia_runtime_fall_back_to_env(
    make_server: Any,
) -> None:
    from tests.kit.docker import spare_dockerd

    with spare_dockerd() as url:
        config = {**FAST_CONFIG, "executor": {"stop_grace": "2s", "docker_url": url}}
        server = make_server(config=config).start()
        api = server.api()
        script = "echo visible=$NVIDIA_VISIBLE_DEVICES gpus=$GPUDOCK_GPUS"
        jobs = [
            submit(api, image=TEST_IMAGE, command=["sh", "-c", script], gpus=1) for _ in range(2)
        ]
        for job_id in jobs:
            done = wait_state(api, job_id, DONE)
            assert done["state"] == "SUCCEEDED", done["reason"]
            (uuid,) = done["gpus"]
            assert api.get(f"/v1/jobs/{job_id}/logs").text == f"visible={uuid} gpus={uuid}\n"
        log = server.log_path.read_text()
        notices = [line for line in log.splitlines() if "no NVIDIA device driver" in line]
        assert len(notices) == 1, notices
        server.stop()
