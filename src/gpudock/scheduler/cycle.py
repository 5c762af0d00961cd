"""One scheduling cycle: ``schedule(snapshot, config) -> Plan``.

The cycle is a pure function (Nomad's "decide, then apply"): it reads the
frozen ``Snapshot``, never the clock or the store, and returns a ``Plan``
that the applier commits conditionally. The same snapshot always yields the
same Plan. It reads as numbered steps (Kueue style)::

    1. order_jobs        pending jobs by the order policy (priority, then FIFO);
                         with queues, fair-share order across them (admission.py)
    2. CycleState        a mutable per-cycle copy of node capacity (each node
                         copied from the snapshot on first use)
    3. for each job, in order:
       a. admit            queue quota (admission.py), else a ``quota`` reason;
                           jobs that would borrow wait for a second pass
       b. filter + score   every node's verdict for the job's request:
                           IndexedCache (built-in profile: a capacity index
                           per class of GPU model and node affinity,
                           O(buckets) per job), else EquivalenceCache (any
                           profile: the policies run per node, shared by equal
                           requests, re-evaluated only on the nodes reserved
                           on since)
       c. select           the feasible node with the best score, ties to the
                           lowest name
       d. pick             the GPU picker chooses GPUs on that node
                           (topology-aware: topology.py)
       e. reserve          take them in the capacity model -> Placement
       f. backfill         a blocked job may use GPUs reserved for the first
                           blocked job if it surely ends before that job
                           starts (backfill.py, EASY)
       g. gangs            a multi-node gang takes its part on each of its
                           best feasible nodes, all at once, or waits
    4. explain           jobs no node could take get PendingReasons, worded
                         against the capacity left at the end of the cycle
    5. preempt           blocked jobs that may preempt choose victims
                         (preemption.py): priority within a queue, reclaim
                         across queues

A blocked job does not block the ones after it, but the first blocked job
(of up to three tried) gets an EASY reservation that later jobs may not
delay. Gangs neither preempt nor hold reservations.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence

from gpudock.config import SchedulerConfig
from gpudock.core.job import PendingReason
from gpudock.scheduler.admission import Admission, QueuePolicy
from gpudock.scheduler.backfill import Reservation
from gpudock.scheduler.capacity import CycleState, ReservationError, matches_model, usable_now
from gpudock.scheduler.equivalence import EquivalenceCache, VerdictCache
from gpudock.scheduler.framework import OrderPolicy, Profile
from gpudock.scheduler.indexed import IndexedCache, indexable
from gpudock.scheduler.policies.binpack import priced_profile
from gpudock.scheduler.preemption import plan_preemptions
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.release import RunningOn
from gpudock.scheduler.running import RunningIndex
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import (
    GangPlacement,
    JobRequest,
    Placement,
    Plan,
    RunningJob,
    Snapshot,
)
from gpudock.scheduler.victims import VictimMemo


def schedule(
    snapshot: Snapshot, config: SchedulerConfig, *, session: SchedulerSession | None = None
) -> Plan:
    """Decide placements for ``snapshot.pending`` on ``snapshot.nodes``.

    Every pending job ends up either placed (in ``plan.placements``, or in
    ``plan.gangs`` for a multi-node gang, exactly once) or in
    ``plan.pending`` with at least one reason, never both. Placements
    never over-commit a GPU, given the snapshot. No I/O, no clock, never
    mutates the snapshot; deterministic, whatever the order of its tuples.

    Without a ``session`` the call is pure: it starts from nothing and
    keeps nothing. A caller running cycle after cycle passes its own
    ``SchedulerSession``, so that each cycle reuses what the previous one
    worked out for the snapshot objects they share; the Plan is the same.
    """
    policy = QueuePolicy.from_config(config.queues, snapshot.queue_history)
    return run_cycle(snapshot, build_profile(config), queues=policy, session=session)


def run_cycle(
    snapshot: Snapshot,
    profile: Profile,
    *,
    index: bool = True,
    queues: QueuePolicy | None = None,
    strict: bool = False,
    explain: bool = True,
    session: SchedulerSession | None = None,
) -> Plan:
    """``schedule`` with an explicit ``Profile`` (tests and the simulator use it).

    ``index=False`` forces the generic path even for an ``indexable`` profile
    (tests compare both). ``queues`` adds fair-share order and quota
    admission (``admission.py``). ``strict`` is strict FIFO per queue
    (head-of-line blocking, as YARN's capacity scheduler or Kueue's
    StrictFIFO): once a job of a queue is blocked, no later job of that
    queue starts in this cycle, and none backfills. ``explain=False`` skips
    the wording of steps 4-4c, for a caller that reads no pending reasons
    (the simulator): the placements, gangs and preemptions are the same,
    but ``plan.pending`` holds only the reasons of steps 3 and 5, so a
    blocked job may be missing from it.

    The garbage collector is paused for the cycle (``collector_paused``).
    """
    with collector_paused():
        return _run_cycle(
            snapshot, profile, index, queues, strict, explain, session or SchedulerSession()
        )


class collector_paused:  # a context manager named as the function it replaced
    """Pause Python's cyclic garbage collector for one cycle; restore its state after.

    A cycle allocates many short-lived containers while keeping its own
    indexes alive to the end, so every collection inside it would traverse
    those structures again and promote them, and full collections (tens of
    milliseconds on a 1,000-node snapshot) would land inside cycles. The
    cycle creates no reference cycles (verdicts and boards point at their
    catalog and search, never back; a test checks that a cycle leaves no
    cyclic garbage), so everything it drops is freed by reference counting
    at once, and the next collection, after the cycle, finds little: in
    ``benchmarks/scheduler_scale.py`` the collector's total time over the
    latency run falls about tenfold. Only an enabled collector is paused
    and re-enabled, so nested or concurrent cycles leave it as they found it.

    A class rather than a generator: leaving a generator-based context
    allocates (its ``StopIteration``) right after the collector is back on,
    which started the collection the cycle's allocations had called for
    inside the cycle, a full one now and then (20-26 ms, three times in the
    benchmark's 300 latency cycles). Leaving this one allocates nothing, so
    that collection runs at the caller's next allocation, after the Plan is
    returned; the benchmark reports it (``gc_between_cycles_ms``).
    """

    __slots__ = ("_enabled",)

    def __enter__(self) -> None:
        self._enabled = gc.isenabled()
        if self._enabled:
            gc.disable()

    def __exit__(self, *_: object) -> None:
        if self._enabled:
            gc.enable()


def _run_cycle(
    snapshot: Snapshot,
    profile: Profile,
    index: bool,
    queues: QueuePolicy | None,
    strict: bool,
    explain: bool,
    session: SchedulerSession,
) -> Plan:
    # binpack's share prices for this job mix
    profile = priced_profile(profile, snapshot, session.largest)
    jobs = order_jobs(snapshot.pending, profile.order)  # 1
    state = CycleState(snapshot.nodes, session.fits)  # 2
    cache: VerdictCache
    if index and indexable(profile):
        cache = IndexedCache(state, profile, session.catalog)
    else:
        cache = EquivalenceCache(state, profile)
    plan = Plan()
    blocked: list[JobRequest] = []
    quota_blocked: list[JobRequest] = []  # refused by admission; may still reclaim
    running = RunningIndex.of(snapshot.running, snapshot.now, session.running)
    nominated = running.preempted_for  # preemptors whose victims are still stopping
    admission = Admission(queues, snapshot) if queues is not None else None
    holders = RunningOn(running)
    reservation: Reservation | None = None
    reservation_tries = 0
    gangs_blocked: list[JobRequest] = []
    heads: dict[str, int] = {}  # strict: the blocked head of each queue
    deferred: list[JobRequest] = []  # would borrow: tried after the first pass
    deferring: set[int] = set()
    # without admission nothing is deferred: the jobs in order, without a generator
    passes = _passes(admission.order(jobs), deferred) if admission else jobs
    for job in passes:  # 3
        if admission and job.id not in deferring and admission.borrows(job):
            deferring.add(job.id)
            deferred.append(job)
            continue
        if strict and job.queue in heads:
            plan.pending[job.id] = [_behind(heads[job.queue])]
            continue
        if strict:
            heads[job.queue] = job.id  # until it is placed, below
        refusal = admission.refuse(job) if admission else None
        if refusal is not None:
            plan.pending[job.id] = [refusal]
            quota_blocked.append(job)
            continue
        if job.nodes > 1:
            gang = place_gang(job, state, cache, profile)  # 3g
            if isinstance(gang, GangPlacement):
                heads.pop(job.queue, None)
                plan.gangs.append(gang)
                if admission:
                    for part in gang.parts:
                        admission.charge(job, part)
            elif isinstance(gang, PendingReason):
                plan.pending[job.id] = [gang]
            else:
                gangs_blocked.append(job)
            continue
        outcome = place_job(job, state, cache, profile)
        if (
            outcome is None
            and reservation
            and job.max_runtime is not None  # ``short_enough``'s first test, inlined
            and reservation.short_enough(job, snapshot.now)
        ):
            outcome = backfill(job, reservation, state, profile)
        if outcome is None:  # first: most jobs of a contended cycle are blocked
            blocked.append(job)
            if job.id in nominated:
                hold_for_preemptor(job, nominated[job.id], state)
            elif (
                reservation is None
                and not strict
                and job.gpus > 0
                and job.topology is None
                and reservation_tries < 3
            ):
                reservation_tries += 1  # EASY: the first blocked job that can be reserved
                reservation = Reservation.make(job, state, holders)
                if reservation is not None:
                    reservation.hold(state)
        elif isinstance(outcome, Placement):
            heads.pop(job.queue, None)
            plan.placements.append(outcome)
            if admission:
                admission.charge(job, outcome)
        else:
            plan.pending[job.id] = [outcome]
    if explain:
        explain_blocked(blocked, cache, plan)  # 4
        explain_gangs(gangs_blocked, cache, plan)
    eta: PendingReason | None = None
    if reservation is not None:  # 4b
        if explain:
            eta = explain_reservation(reservation, blocked, state, plan, snapshot.now)
        reservation.release(state)  # what is held for the reserved job is free to it
        if eta is not None:
            first = reservation.job
            plan.pending[first.id] = [*cache.verdicts(first).reasons(), eta]
    preempting = preempt_for_blocked(
        blocked, state, snapshot, plan, admission, quota_blocked, running, session.victims
    )
    if reservation is not None and eta is not None and reservation.job.id in preempting:
        # it preempts (or waits for its victims): it starts on their GPUs, not at the ETA
        plan.pending[reservation.job.id].remove(eta)
    return plan


def order_jobs(pending: Sequence[JobRequest], order: OrderPolicy) -> list[JobRequest]:
    """Step 1: the pending jobs sorted by ``order.key`` (a total order)."""
    return sorted(pending, key=order.key)


def place_job(
    job: JobRequest, state: CycleState, cache: VerdictCache, profile: Profile
) -> Placement | PendingReason | None:
    """Step 3: place ``job`` and reserve its GPUs in ``state``.

    Returns the Placement (``state`` updated); None when no node can take
    the job now (step 4 explains); or, when a policy misbehaves, a pending
    reason describing the internal error. ``state`` is unchanged unless
    placed.
    """
    name = cache.verdicts(job).best()  # a, b
    if name is None:
        return None
    gpus = profile.picker.pick(job, state.nodes[name])  # c
    if gpus is None:
        return _internal_error(job, name, f"picker {profile.picker.name} found no GPUs")
    try:
        return state.reserve(job, name, gpus)  # d
    except ReservationError as exc:
        return _internal_error(job, name, str(exc))


def place_gang(
    job: JobRequest, state: CycleState, cache: VerdictCache, profile: Profile
) -> GangPlacement | PendingReason | None:
    """Step 3g: a multi-node gang takes ``job.gpus`` on each of ``job.nodes`` nodes, or nothing.

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
        gpus = profile.picker.pick(job, state.nodes[name])
        if gpus is None:
            return _internal_error(job, name, f"picker {profile.picker.name} found no GPUs")
        picks.append((name, gpus))
    try:
        parts = tuple(state.reserve(job, name, gpus) for name, gpus in picks)
    except ReservationError as exc:  # a policy bug; earlier parts stay reserved this cycle
        return _internal_error(job, ", ".join(nodes), str(exc))
    return GangPlacement(job.id, parts)


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


def explain_blocked(blocked: Sequence[JobRequest], cache: VerdictCache, plan: Plan) -> None:
    """Step 4: record why each blocked job waits, in ``plan.pending``.

    Runs after every reservation of the cycle, so reasons describe the
    cluster as the Plan leaves it. Capacity only shrinks within a cycle, so a
    job blocked earlier is still blocked now. Jobs with equal requests share
    one explanation, so this costs O(distinct requests x nodes).
    """
    for job in blocked:
        plan.pending[job.id] = list(cache.verdicts(job).reasons())


def preempt_for_blocked(
    blocked: Sequence[JobRequest],
    state: CycleState,
    snapshot: Snapshot,
    plan: Plan,
    admission: Admission | None = None,
    quota_blocked: Sequence[JobRequest] = (),
    running: RunningIndex | None = None,
    memo: VictimMemo | None = None,
) -> set[int]:
    """Step 5: blocked jobs that may preempt choose victims (``preemption.py``).

    Their ``priority`` reason goes first; the capacity reasons stay after it.
    Returns the ids of the jobs that preempt or wait for their victims.
    """
    if not (blocked or quota_blocked) or not snapshot.running:
        return set()
    preemptions, reasons = plan_preemptions(
        blocked, state, snapshot.running, snapshot.now, admission, quota_blocked, running, memo
    )
    plan.preemptions.extend(preemptions)
    for job_id, reason in reasons.items():
        plan.pending[job_id] = [reason, *plan.pending.get(job_id, [])]
    return set(reasons)


def backfill(
    job: JobRequest, reservation: Reservation, state: CycleState, profile: Profile
) -> Placement | None:
    """Step 3f: a job that ends before the reservation starts may use its GPUs.

    The job was blocked everywhere, so only the reservation's node can take it
    once the held GPUs are released; it is checked there directly with the
    profile's filters and picker (not the verdict cache, which assumes
    capacity only shrinks). The net change is a shrink: the hold is restored
    on whatever the job did not take.
    """
    node = state.nodes[reservation.node]
    reservation.release(state)
    try:
        if all(f.filter(job, node).ok for f in profile.filters):
            gpus = profile.picker.pick(job, node)
            if gpus is not None:
                return state.reserve(job, reservation.node, gpus)
        return None
    except ReservationError:
        return None
    finally:
        reservation.hold(state)


def explain_reservation(
    reservation: Reservation,
    blocked: Sequence[JobRequest],
    state: CycleState,
    plan: Plan,
    now: float,
) -> PendingReason:
    """Step 4b: later jobs held back only by the reservation get its reason first.

    Returns the reserved job's own ETA reason (run_cycle adds it to that job).
    """
    first = reservation.job.id
    node = state.nodes[reservation.node]
    held = [g for g in node.gpus if g.index in reservation.held]
    for job in blocked:
        if job.id == first or job.shared or not held:
            continue
        free = sum(1 for g in node.gpus if usable_now(job, g))
        usable_held = sum(1 for g in held if matches_model(job, g) and g.healthy)
        if free < job.gpus <= free + usable_held:
            plan.pending[job.id] = [
                reservation.blocked_reason(job, now),
                *plan.pending.get(job.id, []),
            ]
    return reservation.reason(now)


def hold_for_preemptor(job: JobRequest, victims: Sequence[RunningJob], state: CycleState) -> None:
    """Step 3e: keep free GPUs on the victims' node for a waiting preemptor.

    Without this, a lower-priority job (often a requeued victim) would take a
    GPU freed by the first victim to stop, and the preemptor would preempt
    again, forever. It holds at most what it needs beyond the victims' GPUs.
    """
    node_name = victims[0].node
    node = state.nodes.get(node_name)
    if node is None:
        return
    still_held = len({u for v in victims if v.node == node_name for u in v.gpu_uuids})
    want = job.gpus - still_held
    if want <= 0:
        return
    free = [g.index for g in node.gpus if usable_now(job, g)][:want]
    state.hold(job, node_name, free)


def _passes(first: Iterator[JobRequest], deferred: list[JobRequest]) -> Iterator[JobRequest]:
    """Every job of ``first``, then those ``deferred`` meanwhile (step 3a's second pass)."""
    yield from first
    yield from deferred


def _behind(head: int) -> PendingReason:
    """Strict FIFO: a job waits for the blocked head of its queue."""
    return PendingReason(
        "priority",
        f"strict FIFO: waits behind job {head}, the first blocked job of its queue",
        f"starts after job {head} does",
    )


def _internal_error(job: JobRequest, node: str, detail: str) -> PendingReason:
    """Filters accepted a node that the picker or the reservation then refused: a policy bug."""
    return PendingReason("devices", f"internal error placing job {job.id} on node {node}: {detail}")
