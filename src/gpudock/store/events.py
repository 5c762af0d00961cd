"""The durable event log: append (inside the caller's transaction), page, prune.

``append`` and ``append_for_job`` never open a session: the caller passes the
session of the transaction that makes the change, so an event is committed
exactly when its change is (and rolled back with it). Ids grow monotonically
(``AUTOINCREMENT`` on SQLite, a sequence on PostgreSQL, whose write
transactions are serialised by ``Database.write``), so ``id`` is the cursor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, delete, or_, select
from sqlalchemy.orm import Session

from gpudock.core.events import EventType
from gpudock.store.models import EventRow, JobRow

MAX_EVENT_ID = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Event:
    id: int
    at: float
    type: str
    job_id: int | None
    user: str | None
    queue: str | None
    node: str | None
    payload: dict[str, Any] = field(default_factory=dict)


def append(
    session: Session,
    type: EventType,
    now: float,
    payload: dict[str, Any],
    *,
    job_id: int | None = None,
    user: str | None = None,
    queue: str | None = None,
    node: str | None = None,
) -> None:
    """Add one event to the caller's transaction."""
    session.add(
        EventRow(
            at=now,
            type=type.value,
            job_id=job_id,
            user=user,
            queue=queue,
            node=node,
            payload=payload,
        )
    )


def append_for_job(
    session: Session,
    type: EventType,
    job_id: int,
    now: float,
    payload: dict[str, Any],
    node: str | None = None,
) -> None:
    """Add an event about job ``job_id``, filling its user and queue from the job row."""
    owner = session.execute(select(JobRow.user, JobRow.queue).where(JobRow.id == job_id)).first()
    user, queue = (owner[0], owner[1]) if owner else (None, None)
    append(session, type, now, payload, job_id=job_id, user=user, queue=queue, node=node)


def list_events(
    session: Session,
    since: int = 0,
    limit: int = 100,
    job_id: int | None = None,
    types: Sequence[EventType] = (),
    visible_to: str | None = None,
) -> list[Event]:
    """Events with id > ``since``, oldest first, at most ``limit``.

    ``visible_to`` (a user name) keeps that user's job events and the
    cluster's node and GPU events (not ``config.*``: admins only); None keeps
    every event (admins).
    """
    if visible_to is not None and "\x00" in visible_to:
        return []
    stmt = select(EventRow).where(EventRow.id > since)
    if job_id is not None:
        stmt = stmt.where(EventRow.job_id == job_id)
    if types:
        stmt = stmt.where(EventRow.type.in_([t.value for t in types]))
    if visible_to is not None:
        cluster = and_(EventRow.job_id.is_(None), EventRow.type.not_like("config.%"))
        stmt = stmt.where(or_(EventRow.user == visible_to, cluster))
    stmt = stmt.order_by(EventRow.id).limit(limit)
    return [
        Event(
            id=r.id,
            at=r.at,
            type=r.type,
            job_id=r.job_id,
            user=r.user,
            queue=r.queue,
            node=r.node,
            payload=dict(r.payload or {}),
        )
        for r in session.scalars(stmt)
    ]


def prune(session: Session, now: float, max_age: float | None, max_count: int | None) -> int:
    """Delete events older than ``max_age`` seconds, then all but the newest ``max_count``.

    None turns a bound off. Ids are never reused (``AUTOINCREMENT`` on SQLite, a
    sequence on PostgreSQL), so a cursor stays valid even when every event went.
    Returns how many events were deleted.
    """
    deleted = 0
    if max_age is not None:
        result = session.execute(delete(EventRow).where(EventRow.at < now - max_age))
        deleted += int(result.rowcount)  # type: ignore[attr-defined]
    if max_count is not None:
        cutoff = session.scalar(
            select(EventRow.id).order_by(EventRow.id.desc()).offset(max(max_count, 1) - 1).limit(1)
        )
        if cutoff is not None:
            result = session.execute(delete(EventRow).where(EventRow.id < cutoff))
            deleted += int(result.rowcount)  # type: ignore[attr-defined]
    return deleted
