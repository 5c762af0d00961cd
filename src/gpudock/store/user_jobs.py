"""Counts of one user's jobs, for per-user limits (``services/queue_access.py``)."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpudock.core.job import JobState
from gpudock.store.models import JobRow


def pending_count(session: Session, user: str, queue: str) -> int:
    """How many PENDING jobs ``user`` has in ``queue``, as this transaction sees them.

    Called in the submit's write transaction, before the insert: writers are
    serialized (SQLite ``BEGIN IMMEDIATE``, PostgreSQL's advisory lock in
    ``Database.write``), so concurrent submits cannot both pass a limit.
    """
    count = session.scalar(
        select(func.count(JobRow.id)).where(
            JobRow.user == user, JobRow.queue == queue, JobRow.state == JobState.PENDING.value
        )
    )
    return int(count or 0)


def pending_by_queue(session: Session, user: str) -> dict[str, int]:
    """``{queue: PENDING jobs of user}``, queues without any left out."""
    rows = session.execute(
        select(JobRow.queue, func.count(JobRow.id))
        .where(JobRow.user == user, JobRow.state == JobState.PENDING.value)
        .group_by(JobRow.queue)
    ).all()
    return {str(queue): int(count) for queue, count in rows}
