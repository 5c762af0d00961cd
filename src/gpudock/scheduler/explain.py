"""Step 4 of the cycle: the words of "why is my job pending".

Run after every reservation of the cycle, so the reasons describe the
cluster as the Plan leaves it. Capacity only shrinks within a cycle, so a
job blocked earlier is still blocked at the end; jobs with equal requests
share one explanation (the verdict cache), so this costs O(distinct
requests x nodes).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.backfill import Reservation
from gpudock.scheduler.capacity import CycleState, GpuState, matches_model, usable_now
from gpudock.scheduler.equivalence import VerdictCache
from gpudock.scheduler.snapshot import JobRequest, Plan


def explain_blocked(blocked: Sequence[JobRequest], cache: VerdictCache, plan: Plan) -> None:
    """Step 4: record why each blocked job waits, in ``plan.pending`` (module doc)."""
    for job in blocked:
        plan.pending[job.id] = list(cache.verdicts(job).reasons())


def explain_gangs(blocked: Sequence[JobRequest], cache: VerdictCache, plan: Plan) -> None:
    """Step 4c: why each blocked gang waits: how many nodes could take a part now.

    ``needs 4 nodes with 8 free GPUs each, all at once; 2 can take a part
    now (gpu-0, gpu-3)``; when no node can, the per-node reasons follow.
    """
    for job in blocked:
        verdicts = cache.verdicts(job)
        ready = verdicts.ranked()
        what = f"{job.gpus} GPUs" if not job.shared else f"{job.gpus} GPU shares"
        need = f"needs {job.nodes} nodes with {what} each, all at once"
        missing = job.nodes - len(ready)
        hint = f"runs when {missing} more {'node has' if missing == 1 else 'nodes have'} room"
        if not ready:
            reason = PendingReason("gang", f"{need}; no node can take a part now", hint)
            plan.pending[job.id] = [reason, *verdicts.reasons()]
            continue
        listed = ", ".join(ready[:5]) + (", ..." if len(ready) > 5 else "")
        count = f"only {len(ready)} can" if len(ready) > 1 else "only 1 can"
        message = f"{need}; {count} take a part now ({listed})"
        plan.pending[job.id] = [PendingReason("gang", message, hint)]


def explain_reservation(
    reservation: Reservation,
    blocked: Sequence[JobRequest],
    state: CycleState,
    plan: Plan,
    now: float,
) -> PendingReason:
    """Step 4b: later jobs held back only by the reservation get its reason first.

    Whole-GPU and shared jobs alike: a GPU held for the reserved job shows
    no free memory, so without this a shared job would read "0B free" of
    GPUs that are idle.

    Returns the reserved job's own ETA reason (``cycle.explain`` adds it to that job).
    """
    first = reservation.job.id
    node = state.nodes[reservation.node]
    held = [g for g in node.gpus if g.index in reservation.held]
    mine = reservation.job.gpu_memory if reservation.job.shared else None
    for job in blocked:
        if job.id == first or not held:
            continue
        free = sum(1 for g in node.gpus if usable_now(job, g))
        usable_held = sum(1 for g in held if _usable_unheld(job, g, mine))
        if free < job.gpus <= free + usable_held:
            plan.pending[job.id] = [
                reservation.blocked_reason(job, now),
                *plan.pending.get(job.id, []),
            ]
    return reservation.reason(now)


def _usable_unheld(job: JobRequest, gpu: GpuState, share: int | None) -> bool:
    """Could ``job`` use ``gpu`` now were the reservation's hold on it (``share`` bytes for a
    shared reserved job, else the whole GPU) given back?"""
    if not gpu.healthy or not matches_model(job, gpu):
        return False
    if share is None:  # held exclusively: it was idle
        return not job.shared or gpu.memory_total >= (job.gpu_memory or 0)
    if not job.shared:
        return gpu.shared_jobs == 1 and gpu.used_memory == share
    return gpu.memory_total - gpu.used_memory + share >= (job.gpu_memory or 0)
