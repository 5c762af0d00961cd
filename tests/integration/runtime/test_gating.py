"""The gates' step of the cycle (``runtime/gating.py``) on the real store, SQLite and
PostgreSQL: held jobs are left out with a stored reason, a failed after-ok dependency
cancels through ``transition``, and an array's limit counts its tasks holding GPUs."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpudock.config import ServerConfig
from gpudock.core.job import JobState
from gpudock.runtime.gating import gate_snapshot
from gpudock.scheduler.snapshot import Snapshot
from gpudock.server import Server, build_server
from gpudock.store import jobs as job_store
from gpudock.store.snapshot import load_snapshot


@pytest.fixture
def server(tmp_path: Path, db_url: str) -> Iterator[Server]:
    """An in-process server (nothing runs in the background) on the real store."""
    server = build_server(tmp_path, ServerConfig(), db_url=db_url, emulate_gpus="4xH100-80GB")
    yield server
    server.ctx.shutdown()
    server.ctx.db.close()


def submit(server: Server, **spec: Any) -> dict[str, Any]:
    client = TestClient(server.app, headers={"Authorization": f"Bearer {server.new_admin_token}"})
    response = client.post("/v1/jobs", json={"image": "busybox", "command": ["true"], **spec})
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def gated(server: Server) -> Snapshot:
    with server.ctx.db.read() as session:
        snapshot = load_snapshot(session, server.ctx.clock())
    return gate_snapshot(server.ctx, snapshot)


def job(server: Server, job_id: int) -> Any:
    with server.ctx.db.read() as session:
        return job_store.get_job(session, job_id)


def move(server: Server, job_id: int, *path: JobState, reason: str | None = None) -> None:
    with server.ctx.db.write() as session:
        for before, after in itertools.pairwise(path):
            done = job_store.transition(
                session,
                job_id,
                before,
                after,
                server.ctx.clock(),
                reason if after.terminal else None,
            )
            assert done


def test_dependencies_hold_then_cancel_through_transition(server: Server) -> None:
    first = submit(server, gpus=1)["id"]
    ok = submit(server, gpus=1, after_ok=[first])["id"]
    anyway = submit(server, gpus=1, after=[first])["id"]
    plain = submit(server, gpus=1)["id"]

    assert [j.id for j in gated(server).pending] == [first, plain]
    held = job(server, ok)
    assert held.state is JobState.PENDING
    assert [r.layer for r in held.pending_reasons] == ["dependency"]
    assert held.pending_reasons[0].message == f"waits for job {first} to succeed (now PENDING)"

    move(server, first, JobState.PENDING, JobState.FAILED, reason="exited with code 1")
    assert [j.id for j in gated(server).pending] == [anyway, plain]
    cancelled = job(server, ok)
    assert cancelled.state is JobState.CANCELLED
    assert cancelled.reason == f"dependency job {first} ended FAILED (after-ok)"
    assert cancelled.pending_reasons == []
    with server.ctx.db.read() as session:
        history = job_store.job_events(session, ok)
    assert history[-1]["to"] == "CANCELLED"  # the event written by transition()


def test_an_array_limit_counts_the_tasks_holding_gpus(server: Server) -> None:
    array = submit(server, gpus=1, array="0-4%2")
    tasks = list(range(array["id"], array["id"] + 5))
    assert (array["array_id"], array["array_index"]) == (array["id"], 0)
    assert [j.id for j in gated(server).pending] == tasks[:2]
    assert job(server, tasks[4]).pending_reasons[0].layer == "array"

    move(server, tasks[0], JobState.PENDING, JobState.ALLOCATED)
    assert [j.id for j in gated(server).pending] == tasks[1:2]
    move(server, tasks[0], JobState.ALLOCATED, JobState.CANCELLED, reason="test")
    assert [j.id for j in gated(server).pending] == tasks[1:3]
