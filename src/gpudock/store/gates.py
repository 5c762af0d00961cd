"""What the gates (``queue/gates.py``) read: pending jobs' dependencies and arrays.

Three queries, never one per job: the gated pending jobs, the states of the
jobs they name, and the tasks of their arrays that hold resources.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gpudock.core.job import JobState
from gpudock.queue.gates import Gated
from gpudock.store.jobs import ACTIVE_STATES
from gpudock.store.models import JobRow


@dataclass(frozen=True, slots=True)
class GateFacts:
    gated: dict[int, Gated] = field(default_factory=dict)
    reasons: dict[int, list[dict[str, str | None]]] = field(default_factory=dict)  # as stored
    states: dict[int, JobState] = field(default_factory=dict)
    active: dict[int, int] = field(default_factory=dict)  # array id -> tasks holding resources
    tasks: dict[int, int] = field(default_factory=dict)  # those tasks: job id -> array id


def load_gate_facts(session: Session, pending: Collection[int]) -> GateFacts:
    """The facts for the ``pending`` job ids that have a dependency or an array limit."""
    rows = session.execute(
        select(
            JobRow.id,
            JobRow.after,
            JobRow.after_ok,
            JobRow.array_id,
            JobRow.array_limit,
            JobRow.pending_reasons,
        ).where(
            JobRow.state == JobState.PENDING.value,
            or_(
                JobRow.after.is_not(None),
                JobRow.after_ok.is_not(None),
                JobRow.array_limit.is_not(None),
            ),
        )
    ).all()
    wanted = set(pending)
    gated = {
        r.id: Gated(r.id, tuple(r.after or ()), tuple(r.after_ok or ()), r.array_id, r.array_limit)
        for r in rows
        if r.id in wanted
    }
    if not gated:
        return GateFacts()
    deps = sorted({d for g in gated.values() for d in (*g.after, *g.after_ok)})
    states = {
        i: JobState(s)
        for i, s in session.execute(select(JobRow.id, JobRow.state).where(JobRow.id.in_(deps)))
    }
    arrays = sorted(
        {g.array_id for g in gated.values() if g.array_id is not None and g.array_limit is not None}
    )
    tasks: dict[int, int] = {
        i: a
        for i, a in session.execute(
            select(JobRow.id, JobRow.array_id).where(
                JobRow.array_id.in_(arrays),
                JobRow.state.in_([s.value for s in ACTIVE_STATES]),
            )
        )
        if a is not None
    }
    active: dict[int, int] = {}
    for array_id in tasks.values():
        active[array_id] = active.get(array_id, 0) + 1
    reasons = {r.id: list(r.pending_reasons or []) for r in rows if r.id in gated}
    return GateFacts(gated, reasons, states, active, tasks)
