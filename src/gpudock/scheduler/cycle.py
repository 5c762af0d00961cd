"""One scheduling cycle: ``schedule(snapshot, config) -> Plan``.

The cycle is a pure function (Nomad's "decide, then apply"): it reads the
frozen ``Snapshot``, never the clock or the store, and returns a ``Plan``
that the applier commits conditionally. The same snapshot always yields the
same Plan. A caller that runs cycle after cycle may pass a
``SchedulerSession`` (``session.py``): the cycle then reuses what the last
one worked out, and the Plan is the same. It reads as numbered steps, each
a function below (Kueue style)::

    0. withhold    held jobs (``gpudock hold``) leave the cycle with a
                   ``hold`` reason (hold.py)
    1. order       pending jobs by the order policy (priority, then FIFO);
                   with queues, fair-share order across them (admission.py);
                   then as the queueing strategies walk them
                   (``gpudock.queue.strategies``: ``borrow-last`` tries jobs
                   that would borrow after all others)
    2. start       the profile's pre-score plugins compute their per-cycle
                   data (share prices); then a mutable per-cycle copy of node
                   capacity (``CycleState``,
                   each node copied from the snapshot on first use) and the
                   verdict cache, from the registry's ``Accelerator``
                   (``acceleration.py``; the default, ``accel/``: a capacity
                   index per class of GPU model and node affinity, O(buckets)
                   per job, unknown filters run on its candidates), else the
                   reference ``EquivalenceCache`` (the policies run per node,
                   shared by equal requests, re-evaluated only on the nodes
                   reserved on since)
    3. for each job, in that order:
       a. admit    the queueing strategies may hold it (``strict-fifo``:
                   behind its queue's blocked head), then the queue's
                   per-user cap and quota (admission.py), else a ``quota``
                   reason
       b. place    filter and score every node, select the best (ties to
                   the lowest name), pick GPUs there (topology-aware:
                   topology.py) and take them in the capacity model ->
                   Placement; a multi-node gang takes its part on each of
                   its best feasible nodes, all at once, or waits; a blocked
                   job may backfill GPUs held by the reservation if it
                   surely ends before the reserved job starts (backfill.py)
       c. reserve  a blocked job: free GPUs on its victims' node are held
                   for it while they stop; else the first blocked job (of
                   up to three tried) gets an EASY reservation that later
                   jobs may not delay
    4. explain     jobs no node could take get PendingReasons, worded
                   against the capacity left at the end of the cycle
                   (``explain.py``); the reserved job gets its ETA
    5. preempt     blocked jobs first take back elastic jobs' GPUs above
                   their minimum (elastic.py); those still blocked that may
                   preempt choose victims (preemption.py): priority within
                   a queue, reclaim across queues
    6. grow        when no job is blocked and nothing is preempted: elastic
                   jobs placed this cycle take free GPUs of their node up to
                   their maximum; running ``elastic: restart`` jobs that could
                   grow are restarted to (``Plan.resizes``; elastic.py)

A blocked job does not block the ones after it (unless a strategy says so).
Gangs neither preempt nor hold reservations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from gpudock.config import SchedulerConfig
from gpudock.core.job import PendingReason
from gpudock.gcpause import collector_paused
from gpudock.queue.strategies import DEFAULT, Walk, strategies
from gpudock.scheduler.acceleration import Accelerator, Reference
from gpudock.scheduler.admission import QueueAdmission, QueuePolicy
from gpudock.scheduler.backfill import Reservation
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.elastic import grow, shrink
from gpudock.scheduler.equivalence import VerdictCache
from gpudock.scheduler.explain import explain_blocked, explain_gangs, explain_reservation
from gpudock.scheduler.framework import OrderPolicy, Profile
from gpudock.scheduler.hold import withhold
from gpudock.scheduler.placing import backfill, hold_for_preemptor, place_gang, place_job
from gpudock.scheduler.post_filter import PostFilter
from gpudock.scheduler.preemption import plan_preemptions
from gpudock.scheduler.registry import ACCELERATOR, build_profile
from gpudock.scheduler.release import RunningOn
from gpudock.scheduler.running import RunningIndex
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import (
    GangPlacement,
    JobRequest,
    Placement,
    Plan,
    Snapshot,
)

__all__ = ["run_cycle", "schedule"]

RESERVATION_TRIES = 3  # blocked jobs tried for the EASY reservation, in order


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
    profile = build_profile(config)
    return run_cycle(snapshot, profile, queues=policy, queueing=config.queueing, session=session)


def run_cycle(
    snapshot: Snapshot,
    profile: Profile,
    *,
    index: bool = True,
    queues: QueuePolicy | None = None,
    queueing: Sequence[str] = DEFAULT,
    explain: bool = True,
    session: SchedulerSession | None = None,
) -> Plan:
    """``schedule`` with an explicit ``Profile`` (tests and the simulator use it).

    ``index=False`` takes ``acceleration.Reference`` (the generic path), not the
    registry's accelerator (tests compare both). ``queues`` adds fair-share order and quota
    admission (``admission.py``). ``queueing`` names the queueing strategies
    of steps 1 and 3a, in order (``gpudock.queue.strategies``; e.g. adding
    ``strict-fifo``: once a job of a queue is blocked, no later job of that
    queue starts in this cycle, and none backfills); ``ValueError`` for an
    unknown name. ``explain=False`` skips the wording of step 4, for a
    caller that reads no pending reasons (the simulator): the placements,
    gangs and preemptions are the same, but ``plan.pending`` holds only the
    reasons of steps 3 and 5, so a blocked job may be missing from it.
    ``session``: see ``schedule``.

    The garbage collector is paused for the cycle (``gpudock.gcpause.collector_paused``).
    """
    with collector_paused():
        return _run_cycle(
            snapshot, profile, index, queues, queueing, explain, session or SchedulerSession()
        )


@dataclass(slots=True)
class Cycle:
    """What steps 2-5 share: the cycle's capacity, verdicts, Plan and loop state."""

    snapshot: Snapshot
    profile: Profile
    state: CycleState
    cache: VerdictCache
    running: RunningIndex
    admission: QueueAdmission | None
    walks: tuple[Walk[JobRequest], ...]  # the queueing strategies' walks (step 1, 3a)
    reserves: bool  # False when a strategy forbids EASY reservations
    holders: RunningOn  # for the EASY reservation (step 3c)
    feasibility: PostFilter  # the filters on nodes as they would be (steps 3c, 5, 6)
    accelerator: Accelerator  # for step 5's victim finder
    session: SchedulerSession
    plan: Plan = field(default_factory=Plan)
    blocked: list[JobRequest] = field(default_factory=list)  # no node could take them
    quota_blocked: list[JobRequest] = field(default_factory=list)  # refused; may reclaim
    gangs_blocked: list[JobRequest] = field(default_factory=list)
    reservation: Reservation | None = None  # the EASY reservation (step 3c)
    reservation_tries: int = 0
    elastic: dict[int, JobRequest] = field(default_factory=dict)  # placed elastic jobs (step 6)


def _run_cycle(
    snapshot: Snapshot,
    profile: Profile,
    index: bool,
    queues: QueuePolicy | None,
    queueing: Sequence[str],
    reasons: bool,
    session: SchedulerSession,
) -> Plan:
    """The numbered steps of the module doc, in order; ``reasons``: ``run_cycle``'s
    ``explain``."""
    snapshot, held = withhold(snapshot)  # 0
    cycle = start(snapshot, profile, index, queues, queueing, session)  # 2
    cycle.plan.pending.update(held)
    for job in order(cycle):  # 1
        if admit(cycle, job):  # 3a
            place(cycle, job)  # 3b, 3c
    eta = explain(cycle, reasons)  # 4
    preempt(cycle, eta)  # 5
    if not (cycle.blocked or cycle.gangs_blocked or cycle.plan.preemptions):  # 6
        grow(
            cycle.state,
            cycle.plan,
            cycle.elastic,
            snapshot.running,
            cycle.admission,
            cycle.feasibility,
        )
    return cycle.plan


def start(
    snapshot: Snapshot,
    profile: Profile,
    index: bool,
    queues: QueuePolicy | None,
    queueing: Sequence[str],
    session: SchedulerSession,
) -> Cycle:
    """Step 2: the cycle's capacity model, with the pre-score plugins' data written into it
    (``framework.PreScorePolicy``); the verdict cache, admission and queue walks."""
    state = CycleState(snapshot.nodes, session.fits)
    for plugin in profile.pre_scorers:
        plugin.pre_score(snapshot, profile, state, session.plugins)
    accelerator: Accelerator = ACCELERATOR() if index else Reference()
    cache: VerdictCache = accelerator.verdicts(state, profile, session)
    feasibility = accelerator.post_filter(state, profile, session)
    admission = QueueAdmission(queues, snapshot) if queues is not None else None
    chosen = strategies(queueing)
    borrows = admission.borrows if admission is not None else None
    running = RunningIndex.of(snapshot.running, snapshot.now, session.running)
    return Cycle(
        snapshot,
        profile,
        state,
        cache,
        running,
        admission,
        walks=tuple(s.walk(borrows) for s in chosen),
        reserves=all(s.reserves for s in chosen),
        holders=RunningOn(running),
        feasibility=feasibility,
        accelerator=accelerator,
        session=session,
    )


def order(cycle: Cycle) -> Iterable[JobRequest]:
    """Step 1: the pending jobs in the order they are tried.

    By ``order_jobs``; with queues, fair share across them (lazily: each
    placement counts towards its queue's share before the next job is
    chosen); then as each queueing strategy walks them.
    """
    ordered = order_jobs(cycle.snapshot.pending, cycle.profile.order)
    jobs: Iterable[JobRequest] = ordered
    if cycle.admission is not None:
        jobs = cycle.admission.order(ordered)
    for walk in cycle.walks:
        jobs = walk.jobs(jobs)
    return jobs


def admit(cycle: Cycle, job: JobRequest) -> bool:
    """Step 3a: True when ``job`` may be placed now; else its reason is in the Plan.

    A queueing strategy may hold it back; then its queue's quota must admit
    it (a job refused by quota may still reclaim, in step 5).
    """
    for walk in cycle.walks:
        held = walk.hold(job)
        if held is not None:
            cycle.plan.pending[job.id] = [held]
            return False
    if cycle.admission is None:
        return True
    refusal = cycle.admission.over_user_limit(job)  # waits; reclaiming would not help
    if refusal is not None:
        cycle.plan.pending[job.id] = [refusal]
        return False
    refusal = cycle.admission.refuse(job)
    if refusal is None:
        return True
    cycle.plan.pending[job.id] = [refusal]
    cycle.quota_blocked.append(job)
    return False


def place(cycle: Cycle, job: JobRequest) -> None:
    """Step 3b: place ``job`` (a gang on all its nodes, or by backfill); else step 3c.

    A placement goes into the Plan and is charged to its queue; a job no
    node can take now is blocked (explained in step 4); a policy that
    misbehaves leaves an internal-error reason.
    """
    if job.nodes > 1:
        gang = place_gang(job, cycle.state, cycle.cache, cycle.profile)
        if isinstance(gang, GangPlacement):
            placed(cycle, job, gang.parts)
            cycle.plan.gangs.append(gang)
        elif isinstance(gang, PendingReason):
            cycle.plan.pending[job.id] = [gang]
        else:
            cycle.gangs_blocked.append(job)
        return
    outcome = place_job(job, cycle.state, cycle.cache, cycle.profile)
    reservation = cycle.reservation
    if (
        outcome is None
        and reservation
        and job.max_runtime is not None  # ``short_enough``'s first test, inlined
        and reservation.short_enough(job, cycle.snapshot.now)
    ):
        outcome = backfill(job, reservation, cycle.state, cycle.profile)
    if outcome is None:  # first: most jobs of a contended cycle are blocked
        cycle.blocked.append(job)
        reserve(cycle, job)  # 3c
    elif isinstance(outcome, Placement):
        placed(cycle, job, (outcome,))
        cycle.plan.placements.append(outcome)
        if job.elastic:
            cycle.elastic[job.id] = job
    else:
        cycle.plan.pending[job.id] = [outcome]


def placed(cycle: Cycle, job: JobRequest, parts: Sequence[Placement]) -> None:
    """Step 3b, placed: the queueing strategies learn it, and its queue is charged."""
    for walk in cycle.walks:
        walk.placed(job)
    if cycle.admission is not None:
        for part in parts:
            cycle.admission.charge(job, part)


def reserve(cycle: Cycle, job: JobRequest) -> None:
    """Step 3c: capacity held for a blocked job, so that later jobs cannot take it.

    A job whose victims are still stopping keeps free GPUs on their node
    (``hold_for_preemptor``). Otherwise the first blocked job that can be
    reserved (of ``RESERVATION_TRIES`` tried) gets the EASY reservation:
    the GPUs it will start on, held from later jobs unless they backfill.
    """
    waiting_for = cycle.running.preempted_for.get(job.id)
    if waiting_for is not None:
        hold_for_preemptor(job, waiting_for, cycle.state)
    elif (
        cycle.reservation is None
        and cycle.reserves
        and job.gpus > 0
        and job.topology is None
        and cycle.reservation_tries < RESERVATION_TRIES
    ):
        cycle.reservation_tries += 1
        cycle.reservation = Reservation.make(job, cycle.state, cycle.holders, cycle.feasibility)
        if cycle.reservation is not None:
            cycle.reservation.hold(cycle.state)


def explain(cycle: Cycle, reasons: bool) -> PendingReason | None:
    """Step 4: why each blocked job and gang waits, worded against the capacity left.

    Later jobs held back only by the reservation get its reason first; then
    the reservation is released (what it holds is free to the reserved
    job), and the reserved job gets its reasons and its ETA, which is
    returned (step 5 drops it when the job preempts instead). The
    reservation goes into ``plan.reservations`` (for ``GET /v1/gpus``).
    ``reasons`` False (``run_cycle``'s ``explain``) skips the wording.
    """
    plan, cache, reservation = cycle.plan, cycle.cache, cycle.reservation
    if reasons:
        explain_blocked(cycle.blocked, cache, plan)
        explain_gangs(cycle.gangs_blocked, cache, plan)
    if reservation is None:
        return None
    eta = None
    if reasons:
        now = cycle.snapshot.now
        eta = explain_reservation(reservation, cycle.blocked, cycle.state, plan, now)
    reservation.release(cycle.state)
    plan.reservations.append(reservation.published())
    if eta is not None:
        first = reservation.job
        plan.pending[first.id] = [*cache.verdicts(first).reasons(), eta]
    return eta


def preempt(cycle: Cycle, eta: PendingReason | None) -> None:
    """Step 5: blocked jobs that may preempt choose victims (``preemption.py``).

    First, blocked jobs take back elastic jobs' GPUs above their minimum
    (``elastic.shrink``); only the jobs still blocked go on to preempt. Their
    ``priority`` or ``fairness`` reason goes first; the capacity reasons stay after it.
    A reserved job that preempts (or waits for its victims) starts on their GPUs, not
    at its ETA: the ETA reason is dropped.
    """
    blocked, quota_blocked, snapshot, plan = (
        cycle.blocked,
        cycle.quota_blocked,
        cycle.snapshot,
        cycle.plan,
    )
    if not (blocked or quota_blocked) or not snapshot.running:
        return
    feasibility = cycle.feasibility
    finder = cycle.accelerator.victims(cycle.state, cycle.running, feasibility)
    waiting = frozenset(cycle.running.preempted_for)
    left = shrink(
        blocked, cycle.state, snapshot.running, snapshot.now, waiting, finder, plan, feasibility
    )
    shrinking = {job.id for job in blocked} - {job.id for job in left}
    blocked = left
    preemptions, reasons = plan_preemptions(
        blocked,
        cycle.state,
        snapshot.running,
        snapshot.now,
        cycle.admission,
        quota_blocked,
        cycle.running,
        finder,
        feasibility,
    )
    plan.preemptions.extend(preemptions)
    for job_id, reason in reasons.items():
        plan.pending[job_id] = [reason, *plan.pending.get(job_id, [])]
    reservation = cycle.reservation
    if reservation is not None and (
        reservation.job.id in reasons or reservation.job.id in shrinking
    ):  # it preempts instead
        plan.reservations.clear()
        if eta is not None:
            plan.pending[reservation.job.id].remove(eta)


def order_jobs(pending: Sequence[JobRequest], order: OrderPolicy) -> list[JobRequest]:
    """Step 1: the pending jobs sorted by ``order.key`` (a total order)."""
    return sorted(pending, key=order.key)
