"""Preemption on a real dockerd: the victim's container stops, the preemptor gets its GPUs."""

from __future__ import annotations

import time
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE, hook_log_entries
from tests.kit.server import FAST_CONFIG, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker
CLASSES = [
    {"name": "batch", "value": 0, "preempt": False},
    {"name": "urgent", "value": 100, "preempt": True},
]


def test_higher_priority_preempts_the_youngest_lower_priority_jobs(
    make_server: Any, docker: Any
) -> None:
    config = {**FAST_CONFIG, "scheduler": {"priority_classes": CLASSES}}
    server = make_server(config=config).start()
    api = server.api()
    instance = api.get("/healthz").json()["instance"]
    low = []
    for _ in range(4):
        low.append(
            submit(api, image=TEST_IMAGE, command=["sleep", "300"], gpus=1, priority_class="batch")
        )
        wait_state(api, low[-1], {"RUNNING"})
        time.sleep(0.05)  # distinct start times: the youngest are the last two
    held = {j: job_state(api, j)["gpus"] for j in low}
    since = time.time()
    urgent = submit(
        api, image=TEST_IMAGE, command=["sleep", "300"], gpus=2, priority_class="urgent"
    )
    running = wait_state(api, urgent, {"RUNNING"}, timeout=60)
    victims = [job_state(api, j) for j in low[2:]]
    for victim in victims:
        assert victim["state"] == "PENDING"
        assert victim["reason"].startswith(f"preempted by job {urgent}")
        assert victim["attempt"] == 1 and victim["submitted_at"] < running["submitted_at"]
        events = [e["to"] for e in victim["events"]]
        assert events[-2:] == ["RUNNING", "PENDING"]
    freed = sorted(g for v in victims for g in held[v["id"]])
    assert sorted(running["gpus"]) == freed, "the preemptor runs on the victims' GPUs"
    assert [job_state(api, j)["state"] for j in low[:2]] == ["RUNNING", "RUNNING"]
    starts = [e for e in hook_log_entries(since) if e["env"].get("GPUDOCK_INSTANCE") == instance]
    assert [e["gpudock_job_id"] for e in starts] == [str(urgent)]
    for victim in victims:
        name = f"gpudock-{instance}-{victim['id']}-a0"
        wait_for(
            lambda name=name: not docker.api.containers(all=True, filters={"name": name}),
            15,
            f"{name} to be removed",
        )
    # the victims wait for GPUs; they never preempt back (their class may not preempt)
    reasons = wait_for(lambda: job_state(api, victims[0]["id"])["pending_reasons"], 20, "reason")
    assert reasons[0]["layer"] in ("devices", "priority")
