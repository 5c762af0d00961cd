"""Queues on a real server: quota admission, `GET /v1/queues`, `gpudock queues`, `gpudock why`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker
QUEUES = {
    "queues": [
        {"name": "vision", "guarantee": {"gpus": 2}, "borrow": False},
        {"name": "nlp", "weight": 2},
    ]
}


def test_a_queue_at_quota_waits_and_reports_it(make_server: Any) -> None:
    config = {**FAST_CONFIG, "scheduler": {"queues": QUEUES}}
    server = make_server(config=config).start()
    api = server.api()
    jobs = [
        submit(api, image=TEST_IMAGE, command=["sleep", "60"], gpus=1, queue="vision")
        for _ in range(3)
    ]
    for job_id in jobs[:2]:
        wait_state(api, job_id, {"RUNNING"})
    reasons = wait_for(lambda: job_state(api, jobs[2])["pending_reasons"], 20, "quota reason")
    assert reasons == [
        {
            "layer": "quota",
            "message": "queue vision at quota 2/2 GPUs; borrowing disabled",
            "counterfactual": reasons[0]["counterfactual"],
        }
    ]
    # the other two GPUs stay usable by a queue that may borrow
    other = submit(api, image=TEST_IMAGE, command=["true"], gpus=2, queue="nlp")
    assert wait_state(api, other, {"SUCCEEDED"})["state"] == "SUCCEEDED"

    report = api.get("/v1/queues").json()
    vision = next(q for q in report["queues"] if q["name"] == "vision")
    assert (vision["running_jobs"], vision["pending_jobs"]) == (2, 1)
    assert vision["usage"]["gpus"] == 2 and vision["guarantee"]["gpus"] == 2
    assert report["capacity"]["gpus"] == 4
    table = server.cli("queues").stdout
    assert "vision" in table and "nlp" in table
    assert json.loads(server.cli("queues", "-o", "json").stdout)["capacity"]["gpus"] == 4
    why = server.cli("why", str(jobs[2])).stdout
    assert "[quota] queue vision at quota 2/2 GPUs; borrowing disabled" in why
