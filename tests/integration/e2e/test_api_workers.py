"""``gpudock server --api-workers 3``: one controller, three API processes, one store.

One server for the module (SQLite): submit, auth, admin, exec and logs through
the workers; a revoked token refused by every worker within a second; an apply
in force in every worker when its response returns; a submit in any worker
waking the controller (the scheduling interval is 30 s, so a job that starts
sooner was woken); ``kill -9`` of a worker during a storm losing no
acknowledged job. A request reaches whichever worker the kernel hands its
connection to: ``by_worker`` opens connections until every worker answered.
On PostgreSQL, one smaller server: wake-ups are notifications there.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from tests.integration.e2e.conftest import teardown
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, submit, wait_for, wait_state
from websockets.sync.client import connect

pytestmark = pytest.mark.docker

WORKERS = 3
CONFIG = {**FAST_CONFIG, "schedule_interval": "30s"}  # only a wake-up starts a job at once
TRUE = {"image": TEST_IMAGE, "command": ["true"], "gpus": 1, "retries": 0}


@pytest.fixture(scope="module")
def server(docker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("workers")
    server = ServerProcess(home, config=CONFIG, api_workers=WORKERS)
    try:
        server.start()
        wait_for(lambda: len(server.workers()) == WORKERS, 60, "three API workers")
        yield server
    finally:
        teardown(server, docker)


def by_worker(
    server: ServerProcess, request: Callable[[httpx.Client], httpx.Response], token: str | None
) -> dict[str, list[httpx.Response]]:
    """``request`` on new connections until every worker answered at least once: each
    worker's answers, by its name (the ``/healthz`` asked on the same connection)."""
    seen: dict[str, list[httpx.Response]] = {}
    for _ in range(300):
        with server.api(token) as api:
            response = request(api)
            name = api.get("/healthz").json()["process"]
        seen.setdefault(name, []).append(response)
        if len(seen) == server.api_workers:
            return seen
    raise AssertionError(f"only {sorted(seen)} answered 300 connections")


def idle(server: ServerProcess) -> None:
    """Wait until no job is pending or running (nothing else wakes the controller)."""
    active = {"PENDING", "ALLOCATED", "STARTING", "RUNNING"}
    with server.api() as api:
        wait_for(
            lambda: not [j for j in api.get("/v1/jobs").json() if j["state"] in active],
            60,
            "no active job",
        )


def test_healthz_names_the_worker_that_answered_and_the_servers_role(
    server: ServerProcess,
) -> None:
    answers = by_worker(server, lambda api: api.get("/healthz"), None)
    pids = server.workers()
    assert sorted(answers) == sorted(pids) == ["api-1", "api-2", "api-3"]
    for name, responses in answers.items():
        assert {r.json()["pid"] for r in responses} == {pids[name]}
        assert {r.json()["role"] for r in responses} == {"leader"}  # its controller said so


def test_a_submit_in_any_worker_wakes_the_controller(server: ServerProcess) -> None:
    idle(server)
    answers = by_worker(server, lambda api: api.post("/v1/jobs", json=TRUE), None)
    began = time.monotonic()
    with server.api() as api:
        for responses in answers.values():
            assert responses[0].status_code == 201, responses[0].text
            wait_state(api, responses[0].json()["id"], {"SUCCEEDED"}, timeout=25)
    assert time.monotonic() - began < 25, "woken, not found by the 30 s interval"


def test_a_token_revoked_through_one_worker_is_refused_by_every_worker_within_a_second(
    server: ServerProcess,
) -> None:
    with server.api() as api:
        made = api.post("/v1/tokens", json={"user": "rita"}).json()
    token, jobs = made["token"], lambda api: api.get("/v1/jobs")
    before = by_worker(server, jobs, token)  # every worker has checked (and cached) it
    assert all(r.status_code == 200 for rs in before.values() for r in rs)

    with server.api(token) as rita:
        assert rita.delete(f"/v1/tokens/{made['id']}").status_code == 200
        revoked = time.monotonic()
        assert rita.get("/v1/jobs").status_code == 401  # at once where it was revoked
    time.sleep(max(0.0, revoked + 1.0 - time.monotonic()))
    after = by_worker(server, jobs, token)
    assert {r.status_code for rs in after.values() for r in rs} == {401}
    assert all("revoked" in r.json()["error"]["message"] for rs in after.values() for r in rs)


def test_an_apply_through_one_worker_is_in_force_in_every_worker_when_it_returns(
    server: ServerProcess,
) -> None:
    with server.api() as api:
        current = api.get("/v1/admin/config").json()
        document = {**current["config"], "priority_classes": [{"name": "rush", "value": 50}]}
        applied = api.put("/v1/admin/config", json=document)
    assert applied.status_code == 200, applied.text
    version = applied.json()["version"]

    shown = by_worker(server, lambda api: api.get("/v1/admin/config"), None)
    assert {r.json()["version"] for rs in shown.values() for r in rs} == {version}
    rush = {**TRUE, "priority_class": "rush"}
    took = by_worker(server, lambda api: api.post("/v1/jobs", json=rush), None)
    assert {r.status_code for rs in took.values() for r in rs} == {201}


def test_submit_logs_exec_and_metrics_through_the_workers(server: ServerProcess) -> None:
    with server.api() as api:
        job = submit(api, image=TEST_IMAGE, command=["sh", "-c", "echo hi; sleep 300"], gpus=1)
        wait_state(api, job, {"RUNNING"})
    logs = by_worker(server, lambda api: api.get(f"/v1/jobs/{job}/logs"), None)
    assert all(b"hi" in r.content for rs in logs.values() for r in rs)
    ran = by_worker(
        server, lambda api: api.post(f"/v1/jobs/{job}/exec", json={"command": ["echo", "x"]}), None
    )
    for responses in ran.values():
        lines = [json.loads(line) for line in responses[0].text.splitlines()]
        assert lines[-1] == {"exit_code": 0}, lines
    url = server.url.replace("http://", "ws://") + f"/v1/jobs/{job}/exec/tty?command=cat"
    headers = {"Authorization": f"Bearer {server.admin_token}"}
    with connect(url, additional_headers=headers, open_timeout=30) as tty:
        tty.send(b"typed\n")
        seen = b""
        while b"typed" not in seen:
            frame = tty.recv(timeout=30)
            assert isinstance(frame, bytes)
            seen += frame
    scraped = by_worker(server, lambda api: api.get("/metrics"), None)  # the controller's
    assert all(b"gpudock_scheduler_placements_total" in r.content for r in _all(scraped))
    with server.api() as api:
        assert api.post(f"/v1/jobs/{job}/cancel").status_code == 200
        wait_state(api, job, {"CANCELLED"})


def test_kill_9_of_a_worker_in_a_storm_loses_no_acknowledged_job(server: ServerProcess) -> None:
    acked: list[int] = []
    lock, stop = threading.Lock(), threading.Event()
    victim, pid = sorted(server.workers().items())[0]

    def storm() -> None:
        with server.api() as api:
            while not stop.is_set():
                try:
                    response = api.post("/v1/jobs", json=TRUE)
                except httpx.TransportError:
                    continue  # its worker died: this one was not acknowledged
                if response.status_code == 201:
                    with lock:
                        acked.append(response.json()["id"])

    threads = [threading.Thread(target=storm) for _ in range(8)]
    for thread in threads:
        thread.start()
    wait_for(lambda: len(acked) >= 40, 60, "a storm under way")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: len(acked) >= 160, 120, "the storm going on")
    stop.set()
    for thread in threads:
        thread.join()

    replaced = wait_for(lambda: server.workers().get(victim) not in (None, pid), 60, "a restart")
    assert replaced
    with server.api() as api:
        stored = {j["id"] for j in _every_job(api)}
    assert len(acked) == len(set(acked)), "no id acknowledged twice"
    assert set(acked) <= stored, f"lost: {sorted(set(acked) - stored)}"
    assert "API worker api-" in server.log_all() and "exited with signal 9" in server.log_all()


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_on_postgresql_workers_wake_the_controller_and_see_an_apply(
    make_server: Callable[..., ServerProcess], db_url: str
) -> None:
    server = make_server(db_url=db_url, config=CONFIG, api_workers=2).start()
    wait_for(lambda: len(server.workers()) == 2, 60, "two API workers")
    took = by_worker(server, lambda api: api.post("/v1/jobs", json=TRUE), None)
    with server.api() as api:
        for responses in took.values():
            wait_state(api, responses[0].json()["id"], {"SUCCEEDED"}, timeout=25)
        current = api.get("/v1/admin/config").json()["config"]
        applied = api.put("/v1/admin/config", json={**current, "priority_classes": []})
    version = applied.json()["version"]
    shown = by_worker(server, lambda api: api.get("/v1/admin/config"), None)
    assert {r.json()["version"] for r in _all(shown)} == {version}


def _all(answers: dict[str, list[httpx.Response]]) -> list[httpx.Response]:
    return [r for responses in answers.values() for r in responses]


def _every_job(api: httpx.Client) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 1000}
    while True:
        response = api.get("/v1/jobs", params=params)
        jobs += response.json()
        if not (cursor := response.headers.get("X-Next-Cursor")):
            return jobs
        params["before"] = int(cursor)
