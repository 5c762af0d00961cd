"""The event log on a real server and dockerd: a job runs, is preempted and runs again;
its events say so in order, its owner sees them, another user does not, admins see all."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker
CLASSES = [
    {"name": "batch", "value": 0, "preempt": False},
    {"name": "urgent", "value": 100, "preempt": True},
]
RESTART_COST = 45.0  # scheduler.preemption.restart_cost
PROTECTED = 3.0  # scheduler.preemption.exempt_time


def start(server: ServerProcess) -> ServerProcess:
    """Start and wait; a loaded CI machine can take over 30 s to import the server."""
    server.start(wait=False)
    server.wait_healthy(timeout=120)
    return server


def token(admin: httpx.Client, user: str) -> str:
    response = admin.post("/v1/tokens", json={"user": user})
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


def all_events(api: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    """Every event visible to ``api``'s user, paging by cursor (pages of 2)."""
    out: list[dict[str, Any]] = []
    cursor = 0
    while True:
        response = api.get("/v1/events", params={**params, "since": cursor, "limit": 2})
        assert response.status_code == 200, response.text
        page = response.json()
        out += page["events"]
        if not page["events"]:
            assert page["next"] == cursor
            return out
        cursor = page["next"]


def summary(events: list[dict[str, Any]]) -> list[str]:
    return [e["payload"]["to"] if e["type"] == "job.state" else e["type"] for e in events]


def preempted_and_back(server: ServerProcess) -> tuple[int, int, str, str]:
    """al's batch job runs, bo's urgent job preempts it once its protected time is over, and
    ends; al's runs again. While it is protected, ``gpudock show`` says until when."""
    admin = server.api()
    al, bo = token(admin, "al"), token(admin, "bo")
    victim = submit(
        server.api(al),
        image=TEST_IMAGE,
        command=["sleep", "300"],
        gpus=1,
        priority_class="batch",
        max_runtime="1h",
    )
    running = wait_state(admin, victim, {"RUNNING"})
    protection = running["preemption"]
    assert (protection["preemptible"], protection["protected_for"]) == (True, PROTECTED)
    assert protection["restart_cost_s"] == RESTART_COST  # its own start took less
    until = protection["protected_until"]  # None once over (a slow machine)
    assert until is None or until == running["started_at"] + PROTECTED
    shown = server.cli("show", str(victim), token=al).stdout
    assert "a restart costs 45s" in shown
    assert ("protected until" in shown) or ("not protected" in shown)
    urgent = submit(
        server.api(bo), image=TEST_IMAGE, command=["sleep", "2"], gpus=1, priority_class="urgent"
    )
    wait_state(admin, urgent, {"SUCCEEDED"}, timeout=90)
    wait_for(
        lambda: (
            job_state(admin, victim)["state"] == "RUNNING" and job_state(admin, victim)["attempt"]
        ),
        60,
        "the victim to run again",
    )
    return victim, urgent, al, bo


def test_a_preempted_job_s_events_in_order_and_seen_only_by_its_owner_and_admins(
    make_server: Any, db_url: str
) -> None:
    """On SQLite and on PostgreSQL (``db_url``)."""
    preemption = {"restart_cost": f"{RESTART_COST:g}s", "exempt_time": f"{PROTECTED:g}s"}
    config = {**FAST_CONFIG, "scheduler": {"priority_classes": CLASSES, "preemption": preemption}}
    server = start(make_server(emulate="1xH100-80GB", config=config, db_url=db_url))
    victim, urgent, al, bo = preempted_and_back(server)
    mine = server.api(al)

    log = all_events(mine, job=victim)
    assert [e["id"] for e in log] == sorted(e["id"] for e in log)
    assert summary(log) == [
        "PENDING", "job.placed", "ALLOCATED", "STARTING", "RUNNING",
        "job.preempted", "PENDING", "job.placed", "ALLOCATED", "STARTING", "RUNNING",
    ]  # fmt: skip
    preempted = log[5]["payload"]
    assert (preempted["preemptor"], preempted["preemptor_user"]) == (urgent, "bo")
    # the cost charged to al's job (the cluster's restart cost: its own start was quicker)
    # and the gain expected (what was left of its max_runtime; bo's run unknown)
    assert preempted["cost_s"] == RESTART_COST
    assert 3600 - 120 < preempted["gain_s"] <= 3600 - PROTECTED
    assert (preempted["preemptor_queue"], preempted["preemptor_class"]) == ("default", "urgent")
    assert log[6]["payload"]["reason"].startswith(f"preempted by job {urgent}")
    assert log[1]["node"] and log[1]["payload"]["gpus"]

    running = job_state(mine, victim)  # running again: the preemption is history, not its reason
    assert (running["state"], running["reason"], running["pending_reasons"]) == (
        "RUNNING",
        None,
        [],
    )
    assert [job["reason"] for job in mine.get("/v1/jobs").json()] == [None]

    assert {e["job"] for e in all_events(mine) if e["job"] is not None} == {victim}
    assert all(e["user"] == "al" for e in all_events(mine) if e["job"] is not None)
    theirs = server.api(bo)
    assert theirs.get("/v1/events", params={"job": victim}).status_code == 404
    assert victim not in {e["job"] for e in all_events(theirs)}
    assert {e["job"] for e in all_events(server.api()) if e["job"]} == {victim, urgent}

    result = server.cli("events", "--job", str(victim), "-o", "json", token=al)
    printed = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["id"] for e in printed] == [e["id"] for e in log]
    table = server.cli("events", "--job", str(victim), token=al).stdout
    assert f"preempted by job {urgent} (bo/default, class urgent)" in table
    refused = server.cli("events", "--job", str(victim), token=bo, check=False)
    assert refused.returncode == 1 and f"job {victim} not found" in refused.stderr


BAD = [
    ("since=-1", "since"),
    ("since=abc", "since"),
    ("limit=0", "limit"),
    ("limit=1001", "limit"),
    ("job=0", "job"),
    ("type=job.bogus", "type"),
]


def test_bad_parameters_get_a_clear_422_naming_the_field(make_server: Any) -> None:
    server = start(make_server())
    api = server.api()
    for query, field in BAD:
        response = api.get(f"/v1/events?{query}")
        assert response.status_code == 422, (query, response.text)
        error = response.json()["error"]
        assert error["field"] == field and "\n" not in error["message"], (query, error)
    unknown = api.get("/v1/events?type=bogus").json()["error"]["message"]
    assert unknown.startswith("unknown event type 'bogus'; one of: job.state,")
    assert api.get("/v1/events?job=999").status_code == 404
    assert api.get("/v1/events?type=job").status_code == 200  # a prefix names its family
    assert httpx.get(server.url + "/v1/events").status_code == 401  # a token is required
