"""A user's controls on a job that are not state changes: hold, release, update.

Each is one conditional UPDATE guarded on the job's current state (and hold
state), so a concurrent scheduler or a second request can never both win;
each records a ``job.changed`` event in the same transaction. A requeue is a
stop request (``jobs.request_stop`` with kind ``requeue``): the runtime
stops the container and ``jobs.transition`` moves the job back to PENDING.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import update
from sqlalchemy.orm import Session

from gpudock.core.events import EventType
from gpudock.core.job import JobSpec, JobState, PendingReason
from gpudock.store import events as event_store
from gpudock.store.models import JobRow


def hold(session: Session, job_id: int, by: str, now: float, reason: PendingReason) -> bool:
    """Hold a PENDING, unheld job; its pending reason becomes ``reason`` at once.

    False (nothing changed) when the job is not PENDING or already held.
    """
    result = session.execute(
        update(JobRow)
        .where(
            JobRow.id == job_id,
            JobRow.state == JobState.PENDING.value,
            JobRow.held_by.is_(None),
        )
        .values(
            held_by=by[:128],
            held_at=now,
            pending_reasons=[reason.to_dict()],
            version=JobRow.version + 1,
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    _changed(session, job_id, now, {"action": "hold", "by": by})
    return True


def release(session: Session, job_id: int, by: str, now: float) -> bool:
    """Release a held job (PENDING or not: a held job that was cancelled stays ended).

    Its pending reasons are cleared; the next cycle explains it afresh.
    False when the job is not held.
    """
    result = session.execute(
        update(JobRow)
        .where(JobRow.id == job_id, JobRow.held_by.is_not(None))
        .values(held_by=None, held_at=None, pending_reasons=[], version=JobRow.version + 1)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    _changed(session, job_id, now, {"action": "release", "by": by})
    return True


def update_pending(
    session: Session,
    job_id: int,
    spec: JobSpec,
    can_preempt: bool,
    by: str,
    now: float,
    changes: dict[str, Any],
) -> bool:
    """Replace a PENDING job's spec (already validated as a submit) and the columns
    the scheduler reads from it. False when the job is no longer PENDING."""
    result = session.execute(
        update(JobRow)
        .where(JobRow.id == job_id, JobRow.state == JobState.PENDING.value)
        .values(
            spec=spec.model_dump(mode="json"),
            priority=spec.priority,
            can_preempt=can_preempt,
            gpus=spec.gpus,
            max_runtime=spec.max_runtime,
            pending_reasons=[],
            version=JobRow.version + 1,
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    _changed(session, job_id, now, {"action": "update", "by": by, "changes": changes})
    return True


def lower_max_runtime(
    session: Session, job_id: int, spec: JobSpec, by: str, now: float, changes: dict[str, Any]
) -> bool:
    """Set an active job's ``max_runtime`` to ``spec.max_runtime`` if that lowers it
    (or sets a first one). False when the job is no longer active or the limit
    would not go down; the reconciler's watchdog reads the new limit."""
    new = spec.max_runtime
    assert new is not None
    active = [JobState.ALLOCATED.value, JobState.STARTING.value, JobState.RUNNING.value]
    result = session.execute(
        update(JobRow)
        .where(
            JobRow.id == job_id,
            JobRow.state.in_(active),
            (JobRow.max_runtime.is_(None)) | (JobRow.max_runtime > new),
        )
        .values(spec=spec.model_dump(mode="json"), max_runtime=new, version=JobRow.version + 1)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    _changed(session, job_id, now, {"action": "update", "by": by, "changes": changes})
    return True


def _changed(session: Session, job_id: int, now: float, payload: dict[str, Any]) -> None:
    event_store.append_for_job(session, EventType.JOB_CHANGED, job_id, now, payload)
