"""``set_pending_reasons`` on real SQLite and PostgreSQL: a cycle rewrites only the
reasons that changed, in one statement, and never touches a job that moved on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from gpudock.core.job import JobSpec, JobState, PendingReason
from gpudock.store import jobs as job_store
from gpudock.store.db import Database

SPEC = JobSpec(image="busybox", command=["true"], gpus=1)
WAITS = [PendingReason("devices", "needs 1 GPU; none is free")]
QUOTA = [PendingReason("quota", "queue default is at its limit")]


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database.open(db_url)
    yield database
    database.close()


def submit(db: Database, count: int) -> list[int]:
    with db.write() as session:
        return [job_store.insert_job(session, SPEC, "al", 0.0).id for _ in range(count)]


def reasons_of(db: Database, job_id: int) -> list[dict[str, Any]] | None:
    with db.read() as session:
        job = job_store.get_job(session, job_id)
    assert job is not None
    return [r.to_dict() for r in job.pending_reasons] if job.pending_reasons else None


def record(db: Database, reasons: dict[int, list[PendingReason]]) -> list[int]:
    """Set the reasons; return the row count of each UPDATE statement it ran."""
    updates: list[int] = []

    def count(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("UPDATE"):
            updates.append(cursor.rowcount)

    event.listen(db.engine, "after_cursor_execute", count)
    try:
        with db.write() as session:
            job_store.set_pending_reasons(session, reasons)
    finally:
        event.remove(db.engine, "after_cursor_execute", count)
    return updates


def test_every_pending_job_gets_its_reasons_in_one_statement(db: Database) -> None:
    ids = submit(db, 3)

    updates = record(db, {job_id: WAITS for job_id in ids})

    assert len(updates) == 1
    assert all(reasons_of(db, job_id) == [r.to_dict() for r in WAITS] for job_id in ids)


def test_reasons_already_stored_are_not_written_again(db: Database) -> None:
    ids = submit(db, 3)
    record(db, {job_id: WAITS for job_id in ids})

    assert record(db, {job_id: WAITS for job_id in ids}) == []


def test_only_the_changed_reasons_are_written(db: Database) -> None:
    first, second = submit(db, 2)
    record(db, {first: WAITS, second: WAITS})

    updates = record(db, {first: WAITS, second: QUOTA})

    assert sum(updates) == 1
    assert reasons_of(db, first) == [r.to_dict() for r in WAITS]
    assert reasons_of(db, second) == [r.to_dict() for r in QUOTA]


def test_a_job_that_left_pending_keeps_what_it_had(db: Database) -> None:
    waiting, cancelled = submit(db, 2)
    with db.write() as session:
        job_store.transition(
            session, cancelled, JobState.PENDING, JobState.CANCELLED, 1.0, reason="test"
        )

    record(db, {waiting: QUOTA, cancelled: QUOTA})

    assert reasons_of(db, waiting) == [r.to_dict() for r in QUOTA]
    assert reasons_of(db, cancelled) is None
