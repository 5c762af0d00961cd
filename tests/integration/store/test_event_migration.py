"""Migration 0004 on real SQLite and PostgreSQL: an existing database gains the event
log, filled from its job history, and loses the stale reasons of jobs that moved on."""

from __future__ import annotations

import pytest
from sqlalchemy import JSON, bindparam, text

from gpudock.core.events import EventType
from gpudock.store import events as event_store
from gpudock.store import jobs as job_store
from gpudock.store.db import Database

STALE = [{"layer": "devices", "message": "no idle GPU", "counterfactual": None}]


def _fill_0003(database: Database) -> None:
    insert_job = text(
        'INSERT INTO jobs (id, "user", queue, priority, spec, gpus, state, reason, attempt, '
        "version, submitted_at, pending_reasons) VALUES (:id, :user, 'vision', 0, :spec, 1, "
        ":state, :reason, 1, 0, 1.0, :reasons)"
    ).bindparams(
        bindparam("spec", {"image": "img", "gpus": 1}, type_=JSON),
        bindparam("reasons", STALE, type_=JSON),
    )
    with database.engine.begin() as conn:
        conn.execute(
            insert_job,
            [
                {"id": 1, "user": "al", "state": "RUNNING", "reason": "preempted by job 2"},
                {"id": 2, "user": "bo", "state": "PENDING", "reason": "preempted by job 3"},
            ],
        )
        conn.execute(
            text(
                "INSERT INTO job_events (job_id, at, attempt, from_state, to_state, reason) VALUES "
                "(1, 1.0, 0, '', 'PENDING', 'submitted'), (2, 1.5, 0, '', 'PENDING', 'submitted'),"
                " (1, 2.0, 0, 'RUNNING', 'PENDING', 'preempted by job 2'),"
                " (1, 3.0, 1, 'STARTING', 'RUNNING', NULL)"
            )
        )


@pytest.fixture
def upgraded(db_url: str) -> Database:
    database = Database.open(db_url, migrate=False)
    database.migrate("0003")
    _fill_0003(database)
    database.migrate()
    return database


def test_upgrade_turns_the_job_history_into_state_events_in_order(upgraded: Database) -> None:
    with upgraded.read() as s:
        events = event_store.list_events(s, limit=100)
    assert [(e.type, e.job_id, e.user, e.queue) for e in events] == [
        ("job.state", 1, "al", "vision"),
        ("job.state", 2, "bo", "vision"),
        ("job.state", 1, "al", "vision"),
        ("job.state", 1, "al", "vision"),
    ]
    assert events[2].payload == {
        "from": "RUNNING",
        "to": "PENDING",
        "reason": "preempted by job 2",
        "attempt": 0,
    }
    assert events[0].payload["from"] is None
    with upgraded.write() as s:  # new events continue after the copied ones
        event_store.append(s, EventType.NODE_HEALTH, 4.0, {"to": "available"}, node="n0")
    with upgraded.read() as s:
        (newest,) = event_store.list_events(s, since=events[-1].id)
    assert newest.type == "node.health"
    upgraded.close()


def test_upgrade_clears_the_stale_reasons_of_jobs_that_moved_on(upgraded: Database) -> None:
    with upgraded.read() as s:
        running, pending = job_store.get_job(s, 1), job_store.get_job(s, 2)
    assert running is not None and pending is not None
    assert (running.reason, running.pending_reasons) == (None, [])
    assert pending.reason == "preempted by job 3"
    assert [r.message for r in pending.pending_reasons] == ["no idle GPU"]
    upgraded.close()


def test_downgrade_to_0003_and_back(upgraded: Database) -> None:
    from alembic import command
    from alembic.config import Config

    from gpudock.store.db import _MIGRATIONS

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with upgraded.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0003")
    upgraded.migrate()
    with upgraded.read() as s:
        assert len(event_store.list_events(s, limit=100)) == 4  # refilled from job_events
    upgraded.close()
