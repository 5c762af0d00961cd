"""Preemption: choose running jobs to stop so a blocked, higher-priority job fits.

Pure functions over the cycle's capacity model. Who *may* be preempted is the
caller's rule (``eligible``): within a queue, a lower priority, and only for a
job whose priority class may preempt (``may_priority_preempt``); across
queues, a borrower that the reclaiming queue may take back from. Whether a
preemption is made at all is ``preemption_rules.py``'s: a protected job is no
candidate (rule 1), and the set chosen is preempted only if it pays for itself
(rule 2, ``commit``). This module answers "which eligible victims, on which node,
lose the least work":

1. on each node the job could use if capacity freed up, add eligible victims
   in preference order (lowest priority, then youngest, then highest id)
   until the job fits (its GPUs and, on nodes that count them, its CPUs and
   host memory: what is free plus what the victims hold);
2. drop every victim the job does not actually need (reverse order);
3. pick the node whose victim set costs least: lowest top victim priority,
   then fewest victims, then least work lost (seconds run), then node name.

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
from gpudock.scheduler.capacity import CycleState, GpuState, NodeState, matches_model, usable_now
from gpudock.scheduler.policies.node_affinity import admits
from gpudock.scheduler.preemption_rules import DEFAULT_RULES, PreemptionRules, commit
from gpudock.scheduler.release import Release, pick_victims
from gpudock.scheduler.running import RunningIndex, victim_order
from gpudock.scheduler.snapshot import JobRequest, NodeView, Preemption, RunningJob
from gpudock.scheduler.topology import largest_group
from gpudock.scheduler.victim_sets import VictimSet, cost_of, preemptible_now
from gpudock.scheduler.wording import victims_text

__all__ = [
    "Definition",
    "Reclaimer",
    "VictimFinder",
    "VictimSet",
    "choose_victims",
    "could_fit_if_freed",
    "fits_after",
    "may_priority_preempt",
    "plan_preemptions",
    "preemptible_now",
    "running_by_node",
    "usable_after",
    "victim_order",
]


def choose_victims(
    job: JobRequest,
    nodes: Iterable[NodeState],
    holders: Mapping[str, Sequence[RunningJob]],
    eligible: Callable[[RunningJob], bool],
    now: float,
    rules: PreemptionRules = DEFAULT_RULES,
) -> VictimSet | None:
    """The cheapest victim set on one node that lets ``job`` fit, or None.

    ``nodes`` are the nodes that pass every filter except capacity;
    ``holders[node]`` the running jobs holding GPUs there; ``rules`` say who is
    protected. The definition; the cycle gets the same answers from its
    accelerator's ``VictimFinder``.
    """
    best: tuple[tuple[float, int, float, str], VictimSet] | None = None
    for node in nodes:
        candidates = [
            v for v in holders.get(node.name, ()) if preemptible_now(v, now, rules) and eligible(v)
        ]
        victims = _victims_on(job, node, candidates)
        if victims is None:
            continue
        cost = cost_of(victims, node.name, now)
        if best is None or cost < best[0]:
            best = (cost, VictimSet(node.name, tuple(sorted(victims, key=lambda v: v.id))))
    return None if best is None else best[1]


def _victims_on(
    job: JobRequest, node: NodeState, candidates: Sequence[RunningJob]
) -> list[RunningJob] | None:
    """Steps 1 and 2 on one node: a minimal victim list, or None if even all do not suffice."""
    release = Release(
        job, node.gpus, node.cpus, node.free_cpus, node.host_memory, node.free_host_memory
    )
    return pick_victims(release, sorted(candidates, key=victim_order))


def fits_after(job: JobRequest, node: NodeState, victims: Sequence[RunningJob]) -> bool:
    """Would ``job`` fit on ``node`` once ``victims`` released what they hold?

    GPUs (in one NVLink domain or NUMA node when the job requires it) and,
    on nodes that count them, cores and host memory.
    """
    if job.cpus and node.cpus is not None:
        freed = sum(v.cpus or 0.0 for v in victims)
        if node.free_cpus + freed + 1e-9 < job.cpus:
            return False
    if job.memory and node.host_memory is not None:
        freed_memory = sum(v.memory or 0 for v in victims)
        if node.free_host_memory + freed_memory < job.memory:
            return False
    usable = usable_after(job, node, victims)
    if job.topology is not None and job.gpus >= 2:
        return largest_group(usable, job.topology) >= job.gpus
    return len(usable) >= job.gpus


def usable_after(job: JobRequest, node: NodeState, victims: Sequence[RunningJob]) -> list[GpuState]:
    """The node's GPUs ``job`` could use after ``victims`` stop (node untouched).

    GPUs no victim holds are tested as they are; the others on copies.
    """
    released: dict[str, list[RunningJob]] = {}
    for victim in victims:
        for uuid in victim.gpu_uuids:
            released.setdefault(uuid, []).append(victim)
    usable = []
    for gpu in node.gpus:
        holders = released.get(gpu.uuid)
        if holders:
            gpu = gpu.copy()
            for victim in holders:
                if victim.memory_per_gpu is None:
                    gpu.exclusive, gpu.used_memory = False, 0
                else:
                    gpu.used_memory = max(0, gpu.used_memory - victim.memory_per_gpu)
                    gpu.shared_jobs = max(0, gpu.shared_jobs - 1)
        if usable_now(job, gpu):
            usable.append(gpu)
    return usable


class Reclaimer(Protocol):
    """Queue-level reclaim rights (``admission.Admission`` implements it)."""

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
        """The priority kind: ``choose_victims`` over the nodes ``could_fit_if_freed``,
        with candidates of ``job``'s queue of a lower priority, not yet taken."""
        ...

    def any_rule(self, job: JobRequest, eligible: Callable[[RunningJob], bool]) -> VictimSet | None:
        """The reclaim kind: ``choose_victims`` with the candidates ``eligible`` admits,
        not yet taken."""
        ...

    def take(self, choice: VictimSet) -> None:
        """The victims of ``choice`` are taken: no later answer of the cycle holds them."""
        ...


class Definition:
    """``VictimFinder`` by the definition: ``choose_victims`` on every node, per job."""

    def __init__(self, state: CycleState, running: RunningIndex) -> None:
        self._state = state
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
        taken, nodes = self._taken, self._state.nodes
        holders = running_by_node([v for v in self._running if v.id not in taken])
        usable = [nodes[n.name] for n in self._state.views.values() if could_fit_if_freed(job, n)]
        return choose_victims(job, usable, holders, eligible, self._now, self._rules)

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
    ``Definition``: try every node).
    """
    if index is None:
        index = RunningIndex.of(running, now)
    rules = index.rules
    stopping = index.preempted_for
    if search is None:
        search = Definition(state, index)
    floor = search.floor  # per queue, the lowest priority that may be preempted now
    preemptions: list[Preemption] = []
    reasons: dict[int, PendingReason] = {}
    for job in blocked:
        if job.id in stopping:
            reasons[job.id] = _waiting(stopping[job.id])
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
        if reclaim is not None and job.id not in stopping:
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


def could_fit_if_freed(job: JobRequest, node: NodeState | NodeView) -> bool:
    """The node is available, admits the job (labels, taints, CPUs and host memory in
    all) and has enough healthy GPUs of the model, free or not."""
    if not node.available or job.gpus == 0 or job.nodes > 1:
        return False
    if not admits(job, node.labels, node.taints):
        return False
    if job.cpus and node.cpus is not None and node.cpus + 1e-9 < job.cpus:
        return False
    if job.memory and node.host_memory is not None and node.host_memory < job.memory:
        return False
    share = job.gpu_memory if job.shared else None
    count = sum(
        1
        for g in node.gpus
        if g.healthy and matches_model(job, g) and (share is None or g.memory_total >= share)
    )
    return count >= job.gpus


def _waiting(stopping: Sequence[RunningJob]) -> PendingReason:
    return PendingReason(
        "priority",
        f"waiting for preempted {victims_text(stopping)} to stop",
        "starts on their GPUs once they have stopped",
    )
