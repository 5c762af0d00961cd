"""Priority that users cannot abuse, on the real server and dockerd.

User alice may not evict user bob's running job by any raw priority or by a
class she is not granted; a preempting class the admin granted her does.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker

CLASSES = [
    {"name": "high", "value": 1000, "preempt": False},  # everyone; orders, never preempts
    {"name": "urgent", "value": 100, "preempt": True, "users": ["alice"]},
    {"name": "vip", "value": 500, "preempt": True, "users": ["carol"]},
    {"name": "rush", "value": 500, "preempt": True, "queues": ["vision"]},
]
CONFIG = {**FAST_CONFIG, "scheduler": {"priority_classes": CLASSES}}
SLEEP = {"image": TEST_IMAGE, "command": ["sleep", "300"], "gpus": 1}


def start(make_server: Any) -> ServerProcess:
    """A server with ``CONFIG``, given time to start on a loaded machine."""
    server: ServerProcess = make_server(config=CONFIG).start(wait=False)
    server.wait_healthy(timeout=120)
    return server


def user(server: ServerProcess, name: str) -> tuple[str, httpx.Client]:
    response = server.api().post("/v1/tokens", json={"user": name})
    assert response.status_code == 201, response.text
    token = response.json()["token"]
    return token, server.api(token)


def refused(response: httpx.Response) -> str:
    assert response.status_code == 403, response.text
    message: str = response.json()["error"]["message"]
    return message


def test_a_user_cannot_evict_another_users_job_without_a_granted_preempting_class(
    make_server: Any,
) -> None:
    server = start(make_server)
    alice_token, alice = user(server, "alice")
    _, bob = user(server, "bob")
    bobs = []
    for _ in range(4):
        bobs.append(submit(bob, **SLEEP))
        wait_state(bob, bobs[-1], {"RUNNING"})
        time.sleep(0.05)  # distinct start times: the youngest is the last

    # a raw priority above the queue's default, or a class not granted: 403, nothing stored
    assert refused(alice.post("/v1/jobs", json={**SLEEP, "priority": 1_000_000})) == (
        "priority 1000000 is above the limit of 0 in queue default: users may only lower "
        "their priority from the queue's default (0); ask an admin for a priority class"
    )
    assert "not granted to user alice" in refused(
        alice.post("/v1/jobs", json={**SLEEP, "priority_class": "vip"})
    )
    assert "may not be used in queue default" in refused(
        alice.post("/v1/jobs", json={**SLEEP, "priority_class": "rush"})
    )
    cli = server.cli("submit", "--priority", "1000000", TEST_IMAGE, token=alice_token, check=False)
    assert cli.returncode == 1
    assert cli.stderr.strip().splitlines() == [
        "error: priority 1000000 is above the limit of 0 in queue default: users may only "
        "lower their priority from the queue's default (0); ask an admin for a priority class"
    ]
    assert alice.get("/v1/jobs").json() == []

    # what alice may use (lower numbers, a class that does not preempt) waits its turn
    waiting = [
        submit(alice, **SLEEP, priority=0),
        submit(alice, **SLEEP, priority=-5),
        submit(alice, **SLEEP, priority_class="high"),
    ]
    for job in waiting:
        reasons = wait_for(lambda job=job: job_state(alice, job)["pending_reasons"], 20, "reason")
        assert not any(r["message"].startswith("preempting") for r in reasons), reasons
    time.sleep(3)  # three more scheduling cycles
    assert [job_state(bob, j)["state"] for j in bobs] == ["RUNNING"] * 4
    assert [job_state(alice, j)["state"] for j in waiting] == ["PENDING"] * 3
    for job in waiting:  # out of the way of the preemptor's GPUs
        assert alice.post(f"/v1/jobs/{job}/cancel").status_code == 200

    # the preempting class the admin granted alice evicts bob's youngest job, which is requeued
    urgent = submit(alice, **SLEEP, priority_class="urgent")
    running = wait_state(alice, urgent, {"RUNNING"}, timeout=60)
    assert running["priority"] == 100
    victim = job_state(bob, bobs[-1])
    assert victim["state"] == "PENDING"
    assert victim["reason"].startswith(f"preempted by job {urgent}")
    assert [e["to"] for e in victim["events"]][-2:] == ["RUNNING", "PENDING"]
    assert [job_state(bob, j)["state"] for j in bobs[:-1]] == ["RUNNING"] * 3


def test_an_admin_may_set_any_priority_and_use_any_class(make_server: Any) -> None:
    server = start(make_server)
    admin = server.api()
    job = submit(admin, **SLEEP, priority=1_000_000)
    assert job_state(admin, job)["priority"] == 1_000_000
    classed = submit(admin, **SLEEP, priority_class="vip")
    assert job_state(admin, classed)["priority"] == 500
