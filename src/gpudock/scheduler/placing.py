"""Steps 3b and 3c of the cycle: putting one job on GPUs, and holding GPUs for it.

Each function changes only the cycle's ``CycleState`` (never the snapshot)
and leaves it unchanged when it does not place. A filter that accepts a
node its picker or the reservation then refuses is a policy bug, reported
as an ``internal error`` pending reason rather than raised.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.backfill import Reservation
from gpudock.scheduler.capacity import CycleState, ReservationError, usable_now
from gpudock.scheduler.equivalence import VerdictCache
from gpudock.scheduler.framework import Profile
from gpudock.scheduler.snapshot import GangPlacement, JobRequest, Placement, RunningJob


def place_job(
    job: JobRequest, state: CycleState, cache: VerdictCache, profile: Profile
) -> Placement | PendingReason | None:
    """Step 3b: place ``job`` and reserve its GPUs in ``state``.

    Returns the Placement (``state`` updated); None when no node can take
    the job now (step 4 explains); or, when a policy misbehaves, a pending
    reason describing the internal error. ``state`` is unchanged unless
    placed.
    """
    name = cache.verdicts(job).best()  # filter, score, select
    if name is None:
        return None
    gpus = profile.picker.pick(job, state.nodes[name], state)  # pick
    if gpus is None:
        return _internal_error(job, name, f"picker {profile.picker.name} found no GPUs")
    try:
        return state.reserve(job, name, gpus)  # take
    except ReservationError as exc:
        return _internal_error(job, name, str(exc))


def place_gang(
    job: JobRequest, state: CycleState, cache: VerdictCache, profile: Profile
) -> GangPlacement | PendingReason | None:
    """Step 3b for a multi-node gang: takes ``job.gpus`` on each of ``job.nodes`` nodes, or nothing.

    The nodes are the best ``job.nodes`` feasible ones (the filters and
    scorers see one part of the gang, a ``job.gpus`` request). The picker
    chooses on each before anything is reserved, so a refusal leaves
    ``state`` unchanged; None when too few nodes can take a part now.
    """
    verdicts = cache.verdicts(job)
    nodes = verdicts.ranked()[: job.nodes]
    if len(nodes) < job.nodes:
        return None
    picks: list[tuple[str, list[int]]] = []
    for name in nodes:
        gpus = profile.picker.pick(job, state.nodes[name], state)
        if gpus is None:
            return _internal_error(job, name, f"picker {profile.picker.name} found no GPUs")
        picks.append((name, gpus))
    try:
        parts = tuple(state.reserve(job, name, gpus) for name, gpus in picks)
    except ReservationError as exc:  # a policy bug; earlier parts stay reserved this cycle
        return _internal_error(job, ", ".join(nodes), str(exc))
    return GangPlacement(job.id, parts)


def backfill(
    job: JobRequest, reservation: Reservation, state: CycleState, profile: Profile
) -> Placement | None:
    """Step 3b, backfill: a job that ends before the reservation starts may use its GPUs.

    The job was blocked everywhere, so only the reservation's node can take it
    once the held GPUs are released; it is checked there directly with the
    profile's filters and picker (not the verdict cache, which assumes
    capacity only shrinks). The hold is then restored on what the reserved job
    can still use; the release is counted (``CycleState.released``), so no verdict
    takes a key as blocked across it.
    """
    node = state.nodes[reservation.node]
    reservation.release(state)
    try:
        if all(f.filter(job, node).ok for f in profile.filters):
            gpus = profile.picker.pick(job, node, state)
            if gpus is not None:
                return state.reserve(job, reservation.node, gpus)
        return None
    except ReservationError:
        return None
    finally:
        reservation.hold(state)


def hold_for_preemptor(job: JobRequest, victims: Sequence[RunningJob], state: CycleState) -> None:
    """Step 3c: keep free GPUs on the victims' node for a waiting preemptor.

    Without this, a lower-priority job (often a requeued victim) would take a
    GPU freed by the first victim to stop, and the preemptor would preempt
    again, forever. It holds at most what it needs beyond the victims' GPUs; a MIG
    job, a free device of its profile when no victim there holds a MIG device
    (``CycleState.hold``).
    """
    node_name = victims[0].node
    node = state.nodes.get(node_name)
    if node is None:
        return
    if job.mig is not None:
        if not any(v.mig is not None for v in victims if v.node == node_name):
            state.hold(job, node_name, ())
        return
    still_held = len({u for v in victims if v.node == node_name for u in v.gpu_uuids})
    want = job.gpus - still_held
    if want <= 0:
        return
    free = [g.index for g in node.gpus if usable_now(job, g)][:want]
    state.hold(job, node_name, free)


def _internal_error(job: JobRequest, node: str, detail: str) -> PendingReason:
    """Filters accepted a node that the picker or the reservation then refused: a policy bug."""
    return PendingReason("devices", f"internal error placing job {job.id} on node {node}: {detail}")
