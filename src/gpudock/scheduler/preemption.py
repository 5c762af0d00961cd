"""Preemption: choose running jobs to stop so a blocked, higher-priority job fits.

Pure functions over the cycle's capacity model. Who *may* be preempted is the
caller's rule (``eligible``): within a queue, a lower priority, and only for a
job whose priority class may preempt (``may_priority_preempt``); across
queues, a borrower that the reclaiming queue may take back from. Who may
preempt at all: a single-node job that asks for GPUs (``may_preempt``). Whether
a preemption is made is ``preemption_rules.py``'s: a protected job is no
candidate (rule 1), and the set chosen is preempted only if it pays for itself
(rules 2 and 3, ``commit``). This module answers "which eligible victims, on
which node, lose the least work":

1. on each node whose filters would admit the job were nothing running there
   (``PostFilter.admits_empty``), add eligible victims in preference order
   (lowest priority, then youngest, then highest id) until the profile's
   filters admit the job on the node as it would be once they stopped
   (``PostFilter.fits_after``: the same filters as placement, built in or new);
2. drop every victim the job does not actually need (reverse order);
3. pick the node whose victim set costs least: lowest top victim priority,
   then fewest victims, then least work lost (seconds run), then node name.

A MIG job preempts like any other: a victim holding a MIG device gives it back once it
stopped (``post_filter.node_after``), so the filters (``mig_capacity``) admit the job
where a victim held a device of its profile.

A victim is never one that is already stopping, not preemptible, or protected
(younger than its ``min_runtime`` or the cluster's ``exempt_time``: rule 1);
``eligible`` need not check those.

``choose_victims`` is the definition, and ``Definition`` answers step 5
(``plan_preemptions``) with it; the registry's accelerator gives the same
answers through the same ``VictimFinder`` Protocol without trying every node
for every blocked job (``accel/victims.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.post_filter import PostFilter
from gpudock.scheduler.preemption_rules import DEFAULT_RULES, PreemptionRules, commit
from gpudock.scheduler.running import RunningIndex, victim_order
from gpudock.scheduler.snapshot import JobRequest, Preemption, RunningJob
from gpudock.scheduler.victim_sets import VictimSet, cost_of, preemptible_now
from gpudock.scheduler.wording import victims_text

__all__ = [
    "Definition",
    "Reclaimer",
    "VictimFinder",
    "VictimSet",
    "choose_victims",
    "may_preempt",
    "may_priority_preempt",
    "plan_preemptions",
    "preemptible_now",
    "running_by_node",
    "victim_order",
]


def choose_victims(
    job: JobRequest,
    nodes: Iterable[str],
    holders: Mapping[str, Sequence[RunningJob]],
    eligible: Callable[[RunningJob], bool],
    now: float,
    feasibility: PostFilter,
    rules: PreemptionRules = DEFAULT_RULES,
) -> VictimSet | None:
    """The cheapest victim set on one node that lets ``job`` fit, or None.

    ``nodes``: the names of the nodes to try (steps 1-3 of the module doc);
    ``holders[node]`` the running jobs holding GPUs there; ``feasibility`` the
    cycle's ``PostFilter``; ``rules`` say who is protected. The definition; the
    cycle gets the same answers from its accelerator's ``VictimFinder``.
    """
    best: tuple[tuple[float, int, float, str], VictimSet] | None = None
    for name in nodes:
        candidates = [
            v for v in holders.get(name, ()) if preemptible_now(v, now, rules) and eligible(v)
        ]
        if not candidates or not feasibility.admits_empty(job, name):
            continue
        victims = feasibility.victims(job, name, sorted(candidates, key=victim_order))
        if victims is None:
            continue
        cost = cost_of(victims, name, now)
        if best is None or cost < best[0]:
            best = (cost, VictimSet(name, tuple(sorted(victims, key=lambda v: v.id))))
    return None if best is None else best[1]


def may_preempt(job: JobRequest) -> bool:
    """A job may take victims at all: one that asks for GPUs or a MIG device, on one node
    (a CPU-only job and a multi-node gang never preempt)."""
    return (job.gpus > 0 or job.mig is not None) and job.nodes == 1


class Reclaimer(Protocol):
    """Queue-level reclaim rights (``admission.QueueAdmission`` implements it)."""

    def reclaim_rule(self, job: JobRequest) -> Callable[[RunningJob], bool] | None:
        """Which running jobs ``job`` may reclaim from now, or None."""
        ...

    def granted(self, job: JobRequest) -> None:
        """Victims were chosen for ``job``: its queue's share now counts it."""
        ...


class VictimFinder(Protocol):
    """Step 5's victim sets for the blocked jobs of one cycle, victims taken as it goes.

    ``Definition`` is the reference; an accelerator's finder (``acceleration.py``)
    must give its answers, job after job. The cycle's capacity does not change
    while a finder is used.
    """

    @property
    def floor(self) -> Mapping[str, int]:
        """Per queue, at most the lowest priority of a candidate (a job that is
        ``preemptible_now``); a queue without one may be missing."""
        ...

    def choose(self, job: JobRequest) -> VictimSet | None:
        """The priority kind: ``choose_victims`` over every node, with candidates of
        ``job``'s queue of a lower priority, not yet taken."""
        ...

    def any_rule(self, job: JobRequest, eligible: Callable[[RunningJob], bool]) -> VictimSet | None:
        """The reclaim kind: ``choose_victims`` with the candidates ``eligible`` admits,
        not yet taken."""
        ...

    def take(self, choice: VictimSet) -> None:
        """The victims of ``choice`` are taken: no later answer of the cycle holds them."""
        ...


class Definition:
    """``VictimFinder`` by the definition: ``choose_victims`` on every node, per job, with
    the cycle's ``PostFilter``."""

    def __init__(self, state: CycleState, running: RunningIndex, feasibility: PostFilter) -> None:
        self._state = state
        self._feasibility = feasibility
        self._now = running.now
        self._rules = running.rules
        self._running = running.running
        self._taken: set[int] = set()
        floor: dict[str, int] = {}
        for victim in self._running:
            if preemptible_now(victim, self._now, self._rules):
                floor[victim.queue] = min(victim.priority, floor.get(victim.queue, victim.priority))
        self._floor = floor

    @property
    def floor(self) -> Mapping[str, int]:
        return self._floor

    def choose(self, job: JobRequest) -> VictimSet | None:
        return self.any_rule(job, lambda v: v.queue == job.queue and v.priority < job.priority)

    def any_rule(self, job: JobRequest, eligible: Callable[[RunningJob], bool]) -> VictimSet | None:
        taken = self._taken
        holders = running_by_node([v for v in self._running if v.id not in taken])
        feasibility, now = self._feasibility, self._now
        views = self._state.views
        return choose_victims(job, views, holders, eligible, now, feasibility, self._rules)

    def take(self, choice: VictimSet) -> None:
        self._taken.update(choice.ids)


def plan_preemptions(
    blocked: Sequence[JobRequest],
    state: CycleState,
    running: Sequence[RunningJob],
    now: float,
    reclaim: Reclaimer | None = None,
    quota_blocked: Sequence[JobRequest] = (),
    index: RunningIndex | None = None,
    search: VictimFinder | None = None,
    feasibility: PostFilter | None = None,
) -> tuple[list[Preemption], dict[int, PendingReason]]:
    """Step 5 of the cycle: preemptions for blocked jobs, highest order first.

    Two kinds, tried in this order:

    * **priority** (``may_priority_preempt``): the job's class may preempt,
      and running, preemptible jobs of its own queue with a lower priority
      hold GPUs it could use;
    * **reclaim**: ``reclaim.reclaim_rule(job)`` (queues only) names the borrowers its
      queue may take capacity back from while under its fair share.

    A job whose earlier victims are still stopping waits for them instead of
    choosing more. Each victim is chosen at most once per cycle, and only if
    the set pays for itself (``commit``): a job whose cheapest set does not
    waits, with a reason that says so, and leaves its victims to later jobs.
    ``quota_blocked`` jobs (refused because borrowers used up what could be
    lent) may only reclaim. Returns the preemptions and, per affected job, a
    ``priority`` or ``fairness`` reason. ``index`` is ``running`` at ``now``
    indexed (``RunningIndex.of``, with the cycle's ``PreemptionRules``), when the
    caller has it; ``search`` finds the victims (the cycle's accelerator's; default
    ``Definition`` with ``feasibility``: try every node). A job that may not preempt
    at all (``may_preempt``) is passed over.
    """
    if index is None:
        index = RunningIndex.of(running, now)
    rules = index.rules
    stopping = index.preempted_for
    if search is None:
        assert feasibility is not None, "the definition needs the cycle's PostFilter"
        search = Definition(state, index, feasibility)
    floor = search.floor  # per queue, the lowest priority that may be preempted now
    preemptions: list[Preemption] = []
    reasons: dict[int, PendingReason] = {}
    for job in blocked:
        if job.id in stopping:
            reasons[job.id] = _waiting(stopping[job.id])
            continue
        if not may_preempt(job):
            continue
        if may_priority_preempt(job, floor):
            choice = search.choose(job)
            if choice is not None:
                why = f"job {job.id} (priority {job.priority})"
                made = commit(job, choice.node, choice.victims, why, rules, now)
                if isinstance(made, PendingReason):
                    reasons[job.id] = made  # not worth it; reclaiming may be
                else:
                    search.take(choice)
                    preemptions.extend(made)
                    reasons[job.id] = PendingReason(
                        "priority",
                        f"preempting {victims_text(choice.victims)} on node {choice.node}",
                        "starts on their GPUs once they have stopped",
                    )
                    continue
        if reclaim is not None:
            _reclaim(job, search, reclaim, rules, now, preemptions, reasons)
    for job in quota_blocked:
        if reclaim is not None and job.id not in stopping and may_preempt(job):
            _reclaim(job, search, reclaim, rules, now, preemptions, reasons)
    return preemptions, reasons


def may_priority_preempt(job: JobRequest, floor: Mapping[str, int]) -> bool:
    """May ``job`` try the priority kind: preempt lower-priority jobs of its own queue?

    Only when its priority class may preempt (``job.can_preempt``; the server
    sets it for jobs of a preempting class only, never for a raw priority:
    ``services.priority``) and some candidate of its queue (``floor``: the
    lowest candidate priority per queue) has a lower priority. Whose the
    victims are does not matter; a number alone never preempts. The reclaim
    kind does not ask this.
    """
    return job.can_preempt and job.priority > floor.get(job.queue, job.priority)


def _reclaim(
    job: JobRequest,
    search: VictimFinder,
    reclaim: Reclaimer,
    rules: PreemptionRules,
    now: float,
    preemptions: list[Preemption],
    reasons: dict[int, PendingReason],
) -> None:
    """The reclaim kind for one job: victims from borrowing queues, if its rule allows
    and they pay for themselves."""
    rule = reclaim.reclaim_rule(job)
    if rule is None:
        return
    choice = search.any_rule(job, rule)
    if choice is None:
        return
    why = f"job {job.id} (queue {job.queue} reclaiming its fair share)"
    made = commit(job, choice.node, choice.victims, why, rules, now, "fairness")
    if isinstance(made, PendingReason):
        reasons.setdefault(job.id, made)
        return
    search.take(choice)
    reclaim.granted(job)
    preemptions.extend(made)
    lenders = ", ".join(sorted({v.queue for v in choice.victims}))
    reasons[job.id] = PendingReason(
        "fairness",
        f"queue {job.queue} is under its fair share: reclaiming "
        f"{victims_text(choice.victims)} from borrowing queue {lenders} on node {choice.node}",
        "starts on their GPUs once they have stopped",
    )


def running_by_node(running: Sequence[RunningJob]) -> dict[str, list[RunningJob]]:
    """The running jobs holding GPUs on each node."""
    holders: dict[str, list[RunningJob]] = {}
    for job in running:
        holders.setdefault(job.node, []).append(job)
    return holders


def _waiting(stopping: Sequence[RunningJob]) -> PendingReason:
    return PendingReason(
        "priority",
        f"waiting for preempted {victims_text(stopping)} to stop",
        "starts on their GPUs once they have stopped",
    )
