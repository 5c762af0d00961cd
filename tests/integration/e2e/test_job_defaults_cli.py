"""CPU and memory accounting on the real server and dockerd: ``job_defaults`` and the node's
capacity keep a flood of jobs that ask for nothing from swamping the host.

The node offers 2 CPUs and 8GiB; jobs get the default 1 CPU and 2GiB. So at
most two CPU-only jobs hold the node at once, the rest wait with a reason,
the defaults are the container's limits, and a job that can never fit the
node's memory is refused at submit.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, submit, wait_for

pytestmark = pytest.mark.docker

GiB = 1024**3
SMALL_NODE = {**FAST_CONFIG, "node": {"cpus": 2, "memory": "8GiB"}}
HOLDING = {"ALLOCATED", "STARTING", "RUNNING"}


@pytest.fixture
def small(make_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A server whose node offers 2 CPUs and 8GiB, with the default ``job_defaults``."""
    return make_server(config=SMALL_NODE).start()


def states(api: httpx.Client, ids: list[int]) -> dict[int, dict[str, Any]]:
    jobs = {j["id"]: j for j in api.get("/v1/jobs").json()}
    return {i: jobs[i] for i in ids}


def cancel_all(api: httpx.Client, ids: list[int]) -> None:
    for job_id in ids:
        api.post(f"/v1/jobs/{job_id}/cancel")


def test_a_flood_of_cpu_only_jobs_queues_and_gets_the_default_limits(
    small: ServerProcess, docker: Any
) -> None:
    with small.api() as api:
        ids = [submit(api, image=TEST_IMAGE, command=["sleep", "60"], gpus=0) for _ in range(6)]
        wait_for(
            lambda: sum(j["state"] == "RUNNING" for j in states(api, ids).values()) == 2,
            what="two jobs running",
        )
        deadline = time.monotonic() + 3  # a few cycles: still two, the rest waiting
        while time.monotonic() < deadline:
            now = states(api, ids)
            assert sum(j["state"] in HOLDING for j in now.values()) <= 2, now
            time.sleep(0.3)
        now = states(api, ids)
        waiting = [j for j in now.values() if j["state"] == "PENDING"]
        assert len(waiting) == 4
        for job in waiting:
            assert (job["spec"]["cpus"], job["spec"]["memory"]) == (1.0, 2 * GiB)
            messages = [r["message"] for r in job["pending_reasons"]]
            assert any("needs 1 CPUs; the most free on one node is 0" in m for m in messages)
        running = [j for j in now.values() if j["state"] == "RUNNING"]
        for job in running:
            host = docker.api.inspect_container(job["container"])["HostConfig"]
            assert (host["NanoCpus"], host["Memory"]) == (10**9, 2 * GiB)
        (node,) = api.get("/v1/nodes").json()
        assert (node["cpus"], node["cpus_used"]) == (2.0, 2.0)
        cancel_all(api, ids)


def test_memory_is_counted_too(small: ServerProcess) -> None:
    with small.api() as api:
        big = {"image": TEST_IMAGE, "command": ["sleep", "60"], "cpus": 0.1, "memory": "5GiB"}
        ids = [submit(api, **big) for _ in range(2)]
        wait_for(lambda: job_running(api, ids[0]), what="the first 5GiB job running")
        time.sleep(2.5)  # two cycles: the second still waits for memory
        second = states(api, ids)[ids[1]]
        assert second["state"] == "PENDING"
        assert any(
            "needs 5GiB memory; the most free on one node is 3GiB" in r["message"]
            for r in second["pending_reasons"]
        ), second["pending_reasons"]
        (node,) = api.get("/v1/nodes").json()  # stored with the node, shown with it
        assert (node["memory"], node["memory_used"]) == (8 * GiB, 5 * GiB)
        assert "5GiB/8GiB" in small.cli("nodes").stdout  # MEMORY: used/offered
        cancel_all(api, ids)


def job_running(api: httpx.Client, job_id: int) -> bool:
    return bool(states(api, [job_id])[job_id]["state"] == "RUNNING")


def test_a_job_larger_than_the_node_is_refused_at_submit(small: ServerProcess) -> None:
    with small.api() as api:
        response = api.post("/v1/jobs", json={"image": TEST_IMAGE, "memory": "9GiB"})
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert (error["code"], error["field"]) == ("Infeasible", "memory")
        assert "needs 9GiB memory; the largest node has 8GiB" in error["message"]
        response = api.post("/v1/jobs", json={"image": TEST_IMAGE, "cpus": 3})
        assert response.status_code == 422, response.text
        assert "needs 3 CPUs; the largest node has 2" in response.json()["error"]["message"]
        assert api.get("/v1/jobs").json() == []
