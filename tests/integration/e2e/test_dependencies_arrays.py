"""Dependencies (``--after``, ``--after-ok``) and job arrays (``--array``) on a real
server and dockerd, through the CLI users type."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, job_state, wait_for, wait_state

pytestmark = pytest.mark.docker


@pytest.fixture
def server(make_server: Any) -> ServerProcess:
    config = {**FAST_CONFIG, "api": {"max_array_size": 50}}
    started: ServerProcess = make_server(config=config).start()
    return started


def submit(server: ServerProcess, *args: str) -> int:
    return int(server.cli("submit", *args).stdout.strip())


def reason(job: dict[str, Any]) -> str:
    reasons = job["pending_reasons"]
    return str(reasons[0]["layer"] + ": " + reasons[0]["message"]) if reasons else ""


def test_after_ok_waits_for_success_and_a_failure_cancels_the_dependent(
    server: ServerProcess,
) -> None:
    api = server.api()
    first = submit(server, TEST_IMAGE, "--", "sh", "-c", "sleep 10")
    after_ok = submit(server, "--after-ok", str(first), TEST_IMAGE, "--", "echo", "second")
    waiting = wait_for(lambda: reason(j := job_state(api, after_ok)) and j, what="a reason")
    assert waiting["state"] == "PENDING"
    assert reason(waiting).startswith(f"dependency: waits for job {first} to succeed (now ")
    assert f"waits for job {first}" in server.cli("why", str(after_ok)).stdout
    done = wait_state(api, after_ok, {"SUCCEEDED", "FAILED", "CANCELLED"})
    assert done["state"] == "SUCCEEDED"
    assert done["started_at"] >= job_state(api, first)["finished_at"]

    failing = submit(server, TEST_IMAGE, "--", "sh", "-c", "sleep 1; exit 3")
    doomed = submit(server, "--after-ok", str(failing), TEST_IMAGE, "--", "true")
    chained = submit(server, "--after-ok", str(doomed), TEST_IMAGE, "--", "true")
    anyway = submit(server, "--after", str(failing), TEST_IMAGE, "--", "true")
    cancelled = wait_state(api, doomed, {"SUCCEEDED", "FAILED", "CANCELLED"})
    assert cancelled["state"] == "CANCELLED"
    assert cancelled["reason"] == f"dependency job {failing} ended FAILED (after-ok)"
    assert cancelled["started_at"] is None
    assert wait_state(api, chained, {"CANCELLED"})["reason"] == (
        f"dependency job {doomed} ended CANCELLED (after-ok)"
    )
    assert wait_state(api, anyway, {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"


def test_a_dependency_on_a_job_the_user_cannot_see_is_refused_and_nothing_stored(
    server: ServerProcess,
) -> None:
    api = server.api()
    theirs = submit(server, TEST_IMAGE, "--", "true")  # the admin's job
    token = api.post("/v1/tokens", json={"user": "bob"}).json()["token"]
    before = len(api.get("/v1/jobs").json())
    for flag, target in (("--after", theirs), ("--after-ok", theirs), ("--after", 99999)):
        bad = server.cli("submit", flag, str(target), TEST_IMAGE, token=token, check=False)
        assert (
            bad.returncode == 1
            and bad.stderr.strip() == f"error: dependency job {target} not found"
        )
    next_id = theirs + 1  # the id the refused job would have had: never self-dependent
    bad = server.cli("submit", "--after", str(next_id), TEST_IMAGE, token=token, check=False)
    assert bad.stderr.strip() == f"error: dependency job {next_id} not found"
    bad = server.cli("submit", "--after", "0", TEST_IMAGE, token=token, check=False)
    assert bad.returncode == 2 and "after" in bad.stderr and "Traceback" not in bad.stderr
    assert len(api.get("/v1/jobs").json()) == before


def test_an_array_runs_each_index_at_most_limit_at_once_and_lists_folded(
    server: ServerProcess,
) -> None:
    api = server.api()
    script = "echo task=$GPUDOCK_ARRAY_INDEX of=$GPUDOCK_ARRAY_ID; sleep 2"
    array = submit(server, "--array", "0-5%2", "--gpus", "1", TEST_IMAGE, "--", "sh", "-c", script)
    tasks = [j for j in api.get("/v1/jobs").json() if j["array_id"] == array]
    assert sorted(t["array_index"] for t in tasks) == list(range(6))
    ids = sorted(t["id"] for t in tasks)
    assert ids[0] == array and ids == list(range(array, array + 6))
    held = wait_for(
        lambda: next((j for j in api.get("/v1/jobs").json() if j["pending_reasons"]
                      and j["pending_reasons"][0]["layer"] == "array"), None),
        what="a task held by the array limit",
    )  # fmt: skip
    assert "at most 2 at once" in held["pending_reasons"][0]["message"]
    folded = server.cli("jobs").stdout
    assert f"{array}[0-5]" in folded and len(folded.strip().splitlines()) == 2
    expanded = server.cli("jobs", "--expand").stdout
    assert len(expanded.strip().splitlines()) == 7

    def every_task_ended() -> list[dict[str, Any]] | None:
        jobs = [job_state(api, i) for i in ids]
        return jobs if all(j["state"] in ENDED for j in jobs) else None

    ended = wait_for(every_task_ended, timeout=180, what="every task to end")
    assert [j["state"] for j in ended] == ["SUCCEEDED"] * 6
    assert most_at_once(ended) == 2  # from the tasks' own run times, not from polling
    for task in tasks:
        logs = server.cli("logs", str(task["id"])).stdout
        assert logs.strip() == f"task={task['array_index']} of={array}"
    done = server.cli("jobs").stdout
    assert "6 SUCCEEDED" in done
    listed = json.loads(server.cli("jobs", "-o", "json").stdout)
    assert len(listed) == 6  # JSON keeps one object per task


ENDED = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")


def most_at_once(jobs: list[dict[str, Any]]) -> int:
    """The most of ``jobs`` running at one time (an end and a start at one instant
    do not overlap)."""
    edges = sorted([(j["started_at"], 1) for j in jobs] + [(j["finished_at"], -1) for j in jobs])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


@pytest.mark.parametrize(
    ("array", "message"),
    [
        ("5-1", "invalid job spec: array: array '5-1': the first index 5 exceeds the last 1"),
        ("0-100000", "array '0-100000' has 100001 tasks; this server allows at most 50"),
        ("0-9%0", "the limit after % must be at least 1"),
    ],
)
def test_bad_arrays_get_one_line_and_create_nothing(
    server: ServerProcess, array: str, message: str
) -> None:
    bad = server.cli("submit", "--array", array, TEST_IMAGE, check=False)
    assert bad.returncode == 2, bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and message in bad.stderr
    assert server.api().get("/v1/jobs").json() == []


def test_estimated_starts_replay_the_queue_with_max_runtime_as_remaining_time(
    server: ServerProcess,
) -> None:
    api = server.api()
    bounded = submit(server, "--gpus", "4", "--max-runtime", "1h", TEST_IMAGE, "--", "sleep", "600")
    started = wait_state(api, bounded, {"RUNNING"})["started_at"]
    waiting = submit(server, "--gpus", "2", "--max-runtime", "10m", TEST_IMAGE, "--", "true")
    behind = submit(server, "--gpus", "4", TEST_IMAGE, "--", "true")
    estimates = {e["job"]: e for e in api.get("/v1/jobs/estimates").json()}
    assert estimates[waiting]["basis"] == "max_runtime"
    assert started + 3600 <= estimates[waiting]["start"] < started + 3600 + 60  # 1-minute steps
    assert estimates[behind]["start"] == pytest.approx(estimates[waiting]["start"] + 600)
    assert bounded not in estimates  # running: no estimate
    table = server.cli("jobs", "--start").stdout
    assert "START" in table.splitlines()[0] and "(max_runtime)" in table
    why = server.cli("why", str(waiting)).stdout
    assert "estimated start:" in why and "(max_runtime)" in why

    token = api.post("/v1/tokens", json={"user": "bob"}).json()["token"]
    bob = server.api(token)
    assert bob.get("/v1/jobs/estimates").json() == []  # other users' jobs: not shown
    assert bob.get("/v1/jobs/estimates", params={"job": waiting}).status_code == 404
    unbounded = submit(server, "--gpus", "0", TEST_IMAGE, "--", "sleep", "600")
    wait_state(api, unbounded, {"RUNNING"})
    api.post(f"/v1/jobs/{bounded}/cancel")
    wait_state(api, bounded, {"CANCELLED"})
    hog = submit(server, "--gpus", "4", TEST_IMAGE, "--", "sleep", "600")
    wait_state(api, hog, {"RUNNING"})
    last = submit(server, "--gpus", "1", TEST_IMAGE, "--", "true")
    estimate = api.get("/v1/jobs/estimates", params={"job": last}).json()[0]
    assert (estimate["start"], estimate["basis"]) == (None, "unknown")
    assert "no max_runtime" in estimate["detail"]
    assert "unknown" in server.cli("why", str(last)).stdout

    queues = {"queues": [{"name": "default", "default_runtime": "2h"}]}  # applied live
    assert api.put("/v1/admin/config", json={"queues": queues}).status_code == 200
    estimate = api.get("/v1/jobs/estimates", params={"job": last}).json()[0]
    assert estimate["basis"] == "queue_default", estimate
    hog_started = job_state(api, hog)["started_at"]
    assert hog_started + 7200 <= estimate["start"] < hog_started + 7200 + 60
    assert "(queue_default)" in server.cli("why", str(last)).stdout
