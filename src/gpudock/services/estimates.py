"""Estimated start times of pending jobs (``sim/start_times.py``), for the API and CLI.

Each call reads one snapshot and the gate facts in one short read
transaction, then replays them outside it, on the caller's thread: it never
takes the controller's ``SchedulerSession`` or waits for a cycle. A running
job ends at its ``max_runtime``, or its queue's ``default_runtime``. The
replay sees every user's jobs (they share the GPUs); a caller gets only
the estimates of the jobs they may see, and their wording names no other
user's job.
"""

from __future__ import annotations

from dataclasses import replace

from gpudock.runtime.context import RuntimeContext
from gpudock.services.jobs import JobService
from gpudock.sim.start_times import Gates, StartEstimate, estimate_starts
from gpudock.store import published
from gpudock.store.gates import load_gate_facts
from gpudock.store.snapshot import load_snapshot
from gpudock.store.tokens import Principal

MAX_PENDING = 5000  # pending jobs replayed, in scheduling order (as a cycle takes them)


class EstimateService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def starts(self, principal: Principal, job_id: int | None = None) -> list[StartEstimate]:
        """Estimates of the caller's pending jobs (an admin's: everyone's), in scheduling
        order; with ``job_id``, of that job only (``NotFound`` unless the caller may
        see it; empty when it is not pending)."""
        if job_id is not None:
            JobService(self.ctx).get(job_id, principal)
        with self.ctx.db.read() as session:
            self.ctx.sync(session)
            scheduler = self.ctx.config.scheduler
            snapshot = load_snapshot(session, self.ctx.clock(), limit=MAX_PENDING)
            facts = load_gate_facts(session, [j.id for j in snapshot.pending])
            half_life = scheduler.queues.fair_share.half_life
            history = published.history_at(session, snapshot, half_life)
        snapshot = replace(snapshot, queue_history=history)
        owners = {j.id: j.user for j in snapshot.pending}
        wanted = [
            j.id
            for j in snapshot.pending
            if (job_id is None or j.id == job_id)
            and (principal.is_admin or owners[j.id] == principal.user)
        ]
        if not wanted:
            return []
        gates = Gates(facts.gated, facts.states, facts.tasks)
        defaults = {q.name: q.default_runtime for q in scheduler.queues.queues if q.default_runtime}
        found = estimate_starts(snapshot, scheduler, gates, defaults, wanted=wanted)
        return [found[i] for i in wanted]
