"""The gates' step of the server's cycle: dependencies and array limits first.

``gate_snapshot`` runs before ``schedule``: it reads the gate facts
(``store/gates.py``), asks the pure gates (``queue/gates.py``), cancels the
jobs whose ``after_ok`` dependency failed (through ``transition``, the one
gate of state changes), records the reasons of the held jobs (only those
that changed) and returns the snapshot without them. Database only; no
Docker call.
"""

from __future__ import annotations

from dataclasses import replace

from gpudock.core.job import JobState, PendingReason
from gpudock.queue.gates import GateVerdict, gate
from gpudock.runtime.context import RuntimeContext
from gpudock.scheduler.snapshot import Snapshot
from gpudock.store import jobs as job_store
from gpudock.store.gates import load_gate_facts


def gate_snapshot(ctx: RuntimeContext, snapshot: Snapshot) -> Snapshot:
    """``snapshot`` less the pending jobs the gates hold or cancel (those cancelled,
    cancelled; the reasons of those held, stored)."""
    if not snapshot.pending:
        return snapshot
    order = [job.id for job in snapshot.pending]
    with ctx.db.read() as session:
        facts = load_gate_facts(session, order)
    if not facts.gated:
        return snapshot
    verdict = gate(order, facts.gated, facts.states, facts.active)
    changed = {
        job_id: [reason]
        for job_id, reason in verdict.held.items()
        if facts.reasons.get(job_id) != [reason.to_dict()]
    }
    if verdict.cancelled or changed:
        _record(ctx, verdict, changed)
    excluded = verdict.excluded
    if not excluded:
        return snapshot
    return replace(snapshot, pending=tuple(j for j in snapshot.pending if j.id not in excluded))


def _record(
    ctx: RuntimeContext, verdict: GateVerdict, changed: dict[int, list[PendingReason]]
) -> None:
    now = ctx.clock()
    with ctx.db.write() as session:
        for job_id, reason in verdict.cancelled.items():
            job_store.transition(session, job_id, JobState.PENDING, JobState.CANCELLED, now, reason)
        job_store.set_pending_reasons(session, changed)
