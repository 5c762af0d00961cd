"""Queue admission inside the cycle: fair-share order and quota checks (``gpudock.queue``).

Active only when the config declares queues; otherwise the cycle runs jobs
in plain priority order with no quota, exactly as before. With queues::

    1a. usage     each queue's usage from its running jobs (exact GPU-equivalents:
                  a 20GiB share of an 80GiB GPU counts 1/4 GPU and 20GiB; a MIG
                  job its profile's compute sevenths, ``3g.40gb`` 3/7 GPU, and
                  its device's memory); a GPU in MIG mode counts in capacity
    1b. order     FairShareOrder: next job from the queue with the lowest
                  weighted dominant share (history included), ties by name;
                  within a queue, the order policy's order
    3.  admit     QuotaLedger.check: within the guarantee, or borrowing what
                  the cohort lends and staying under the limit; else a
                  ``quota`` pending reason. Jobs that would borrow wait for a
                  second pass, after every job that fits its own guarantee
                  (as Kueue does), so a borrower never takes capacity that a
                  lender's own job needs in the same cycle
    3.  users     a queue's ``max_running_gpus_per_user`` (``queue/user_limits.py``):
                  a job taking its user over it waits (``quota`` reason) and
                  never reclaims
    3d. charge    a placed job's exact usage is charged to its queue (and its
                  user), so later jobs of the cycle see it
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from gpudock.core.inventory import gpu_model_matches
from gpudock.core.job import PendingReason
from gpudock.core.mig import COMPUTE_SLICES, compute_slices, profile_memory
from gpudock.queue import (
    FairShare,
    FairShareOrder,
    NeverAdmitted,
    Quantity,
    QueuesConfig,
    QueueSet,
    QuotaLedger,
    Resources,
    UsageHistory,
    capacity_of,
    entitlements,
    job_usage,
    mig_usage,
    never_admitted,
    request_usage,
)
from gpudock.queue.user_limits import UserLimits
from gpudock.scheduler.snapshot import (
    JobRequest,
    MigView,
    NodeView,
    Placement,
    RunningJob,
    Snapshot,
)


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """The declared queues and fair-share settings, plus decayed usage history."""

    config: QueuesConfig
    queues: QueueSet
    history: UsageHistory | None = None

    @classmethod
    def from_config(
        cls, config: QueuesConfig, history: UsageHistory | None = None
    ) -> QueuePolicy | None:
        """None when no queue is declared (no admission step at all)."""
        if not config.queues:
            return None
        return cls.build(config, history)

    @classmethod
    def build(cls, config: QueuesConfig, history: UsageHistory | None = None) -> QueuePolicy:
        """The policy even with no declared queue (the implicit ``default`` only)."""
        return cls(config, QueueSet.from_config(config), history)


def mig_devices(nodes: Iterable[NodeView]) -> dict[str, MigView]:
    """Every MIG device of ``nodes``, by uuid (empty for a cluster without MIG)."""
    return {m.uuid: m for n in nodes if n.migs for m in n.migs}


def device_usage(uuid: str, devices: Mapping[str, MigView], cpus: float | None = None) -> Resources:
    """What a job holding MIG device ``uuid`` counts (``mig_usage``: its profile's compute
    sevenths of a GPU and its memory), with its ``cpus``; a device ``devices`` no longer
    shows counts the CPUs alone (capacity does not count it either)."""
    device = devices.get(uuid)
    if device is None:
        return job_usage(None, (), cpus)
    compute = compute_slices(device.profile)
    return mig_usage(compute, COMPUTE_SLICES, device.memory_total, cpus)


def _held(job: RunningJob, totals: Mapping[str, int], devices: Mapping[str, MigView]) -> Resources:
    """What running ``job`` counts against its queue: its GPUs, or its MIG device."""
    if job.mig is not None:
        return device_usage(job.mig, devices, job.cpus)
    return job_usage(job.memory_per_gpu, [totals.get(u, 0) for u in job.gpu_uuids], job.cpus)


def queue_usage(snapshot: Snapshot) -> dict[str, Resources]:
    """What each queue's running jobs hold now (``job_usage`` of each job, ``device_usage``
    of a MIG job's device; jobs alike in queue, share, GPU sizes or device, and CPUs are
    counted once, times their number: exact)."""
    totals = {g.uuid: g.memory_total for n in snapshot.nodes for g in n.gpus}
    devices = mig_devices(snapshot.nodes)
    alike = Counter(
        (
            job.queue,
            job.memory_per_gpu,
            tuple(totals.get(u, 0) for u in job.gpu_uuids),
            job.cpus,
            job.mig,
        )
        for job in snapshot.running
    )
    usage: dict[str, Resources] = {}
    for (queue, share, sizes, cpus, mig), count in alike.items():
        one = job_usage(share, sizes, cpus) if mig is None else device_usage(mig, devices, cpus)
        usage[queue] = usage.get(queue, Resources()) + one.times(count)
    return usage


def user_usage(snapshot: Snapshot) -> dict[tuple[str, str], Quantity]:
    """GPU-equivalents each user's running jobs hold, per ``(queue, user)`` (a MIG job's
    device counts its compute sevenths, as in ``queue_usage``)."""
    totals = {g.uuid: g.memory_total for n in snapshot.nodes for g in n.gpus}
    devices = mig_devices(snapshot.nodes)
    held: dict[tuple[str, str], Quantity] = {}
    for job in snapshot.running:
        gpus = _held(job, totals, devices).gpus
        held[job.queue, job.user] = held.get((job.queue, job.user), 0) + gpus
    return held


def mig_request(profile: str, devices: Iterable[MigView], cpus: float | None) -> Resources:
    """What a pending MIG job of ``profile`` is charged: ``mig_usage`` on the largest of
    ``devices`` of its profile (else the memory its name states: ``profile_memory``)."""
    memory = max((d.memory_total for d in devices if d.profile == profile), default=0)
    compute = compute_slices(profile)
    return mig_usage(compute, COMPUTE_SLICES, memory or profile_memory(profile), cpus)


def never_admitted_on(
    config: QueuesConfig, job: JobRequest, nodes: Sequence[NodeView]
) -> NeverAdmitted | None:
    """Why ``job`` could never be admitted into its queue on ``nodes``, or None.

    ``queue.never_admitted`` with ``job`` priced as ``QueueAdmission.estimate``
    prices it, over every GPU of ``nodes`` (availability and health ignored:
    what a node that is down may bring back counts), as the submit check and
    the simulator's skip ask it. None without declared queues.
    """
    if not config.queues:
        return None
    gpus = [g for n in nodes for g in n.gpus]
    if job.mig is not None:
        request = mig_request(job.mig, (m for n in nodes for m in n.migs), job.cpus)
    else:
        model = job.gpu_model
        eligible = [
            g.memory_total for g in gpus if model is None or gpu_model_matches(model, g.name)
        ]
        share = job.gpu_memory if job.shared else None
        request = request_usage(job.gpus, job.nodes, share, eligible, job.cpus)
    capacity = capacity_of((g.memory_total for g in gpus), _cpus(nodes))
    return never_admitted(config, job.queue, job.user, request, capacity)


def usable_capacity(snapshot: Snapshot) -> Resources:
    """Healthy GPUs on available nodes (a GPU in MIG mode with a healthy device among
    them), as ``gpudock.queue`` counts capacity (CPUs as 0: fair share weighs GPUs and
    GPU memory)."""
    return capacity_of(_usable_totals(snapshot.nodes))


def _usable_totals(nodes: Iterable[NodeView]) -> Iterator[int]:
    """The ``memory_total`` of each GPU jobs may use on available ``nodes``: healthy, or in
    MIG mode with a healthy MIG device (its devices' jobs count sevenths of it)."""
    for n in nodes:
        if not n.available:
            continue
        if n.migs:
            parents = {m.parent for m in n.migs if m.healthy}
            yield from (g.memory_total for g in n.gpus if g.healthy or g.uuid in parents)
        else:
            yield from (g.memory_total for g in n.gpus if g.healthy)


def quota_capacity(snapshot: Snapshot) -> Resources:
    """``usable_capacity`` and the CPU cores available nodes offer: what quotas lend
    from. A queue with a CPU limit but no CPU guarantee borrows its CPUs from the
    cluster's unguaranteed cores, so they must be counted (only when some queue
    puts a quota on CPUs does admission look at them)."""
    available = [n for n in snapshot.nodes if n.available]
    return capacity_of(_usable_totals(available), _cpus(available))


def _cpus(nodes: Iterable[NodeView]) -> float:
    """The CPU cores ``nodes`` offer jobs (a node that does not count CPUs adds none)."""
    return sum((n.cpus for n in nodes if n.cpus is not None), 0.0)


class QueueAdmission:
    """Steps 1 and 3 for one cycle; mutable (the ledger), never touches the snapshot."""

    def __init__(
        self,
        policy: QueuePolicy,
        snapshot: Snapshot,
        usage: Mapping[str, Resources] | None = None,
    ) -> None:
        """``usage``: ``queue_usage(snapshot)``, when the caller has it already."""
        self._totals = {g.uuid: g.memory_total for n in snapshot.nodes for g in n.gpus}
        self._devices = mig_devices(snapshot.nodes)  # MIG devices by uuid (usually none)
        self._gpus = [
            (g.name, g.memory_total)
            for n in snapshot.nodes
            if n.available
            for g in n.gpus
            if g.healthy
        ]
        capacity = usable_capacity(snapshot)
        self.ledger = QuotaLedger(
            policy.queues,
            quota_capacity(snapshot),
            queue_usage(snapshot) if usage is None else usage,
        )
        self.fair = FairShare.build(
            policy.queues, policy.config.fair_share, capacity, policy.history
        )
        self._sizes: dict[str | None, list[int]] = {}  # distinct eligible GPU sizes, by model
        self._grants = 0  # moves with every ``granted``
        # reclaim answers, kept while the ledger's version and ``_grants`` are ``_rules_at``
        self._rules: dict[tuple[str, Resources], Callable[[RunningJob], bool] | None] = {}
        self._borrowers: frozenset[str] | None = None  # ``_borrowing``
        self._rules_at = (-1, -1)
        self._estimates: dict[
            tuple[int, int, int | None, str | None, float | None, str | None], Resources
        ] = {}
        self._entitled: dict[str, Resources] | None = None
        self._pending = snapshot.pending
        self._nodes = snapshot.nodes
        self._promised: dict[str, Resources] = {}  # reclaims under way, per queue
        self.users = UserLimits.of(policy.config, lambda: user_usage(snapshot))
        waiting = {r.preempted_for for r in snapshot.running if r.preempted_for is not None}
        for job in snapshot.pending:
            if job.id in waiting:
                self.granted(job)

    def order(self, jobs: Sequence[JobRequest]) -> Iterator[JobRequest]:
        """Step 1b: fair-share order across queues, keeping ``jobs``' order within each."""
        heads: dict[str, list[JobRequest]] = {}
        for job in jobs:
            heads.setdefault(job.queue, []).append(job)
        return iter(FairShareOrder(heads, self.fair, self.ledger.usage))

    def estimate(self, job: JobRequest) -> Resources:
        """What admission charges ``job`` before it is placed (an upper bound).

        A gang counts every node's part; a MIG job its profile (``mig_request``, on the
        devices of available nodes). Jobs of one shape share one answer per cycle (the
        eligible GPUs stand still within it).
        """
        share = job.gpu_memory if job.shared else None
        key = (job.gpus, job.nodes, share, job.gpu_model, job.cpus, job.mig)
        found = self._estimates.get(key)
        if found is None:
            if job.mig is not None:
                found = mig_request(job.mig, self._available_devices(), job.cpus)
            else:
                found = request_usage(
                    job.gpus, job.nodes, share, self._eligible(job.gpu_model), job.cpus
                )
            self._estimates[key] = found
        return found

    def _available_devices(self) -> Iterator[MigView]:
        """The healthy MIG devices of available nodes (where a MIG job may be placed)."""
        return (m for n in self._nodes if n.available for m in n.migs if m.healthy)

    def refuse(self, job: JobRequest) -> PendingReason | None:
        """Step 3: None if the queue may take ``job`` now, else the quota reason."""
        verdict = self.ledger.check(job.queue, self.estimate(job))
        return None if verdict.admitted else verdict.reason

    def over_user_limit(self, job: JobRequest) -> PendingReason | None:
        """Step 3, users: the reason when ``job`` takes its user over the queue's cap."""
        if self.users is None:
            return None
        return self.users.refuse(job.queue, job.user, self.estimate(job).gpus)

    def borrows(self, job: JobRequest) -> bool:
        """True when admitting ``job`` now would take borrowed capacity."""
        verdict = self.ledger.check(job.queue, self.estimate(job))
        return verdict.admitted and verdict.borrows

    def charge(self, job: JobRequest, placement: Placement) -> None:
        """Step 3d: the placed job's exact usage now counts against its queue."""
        if placement.mig is not None:
            usage = device_usage(placement.mig, self._devices, job.cpus)
        else:
            totals = [self._totals.get(u, 0) for u in placement.gpu_uuids]
            usage = job_usage(placement.memory_per_gpu, totals, job.cpus)
        self.ledger.charge(job.queue, usage)
        if self.users is not None:
            self.users.charge(job.queue, job.user, usage.gpus)

    def granted(self, job: JobRequest) -> None:
        """``job`` reclaims capacity (victims chosen): count it against its fair share."""
        self._promised[job.queue] = self._promised.get(job.queue, Resources()) + self.estimate(job)
        self._grants += 1

    def reclaim_rule(self, job: JobRequest) -> Callable[[RunningJob], bool] | None:
        """Who ``job`` may reclaim from, or None if its queue is at its fair share.

        A queue may take capacity back from queues that borrow (use more than
        their guarantee) while it stays within its fair share (weighted
        water-filling of capacity over every queue's demand), not only within
        its guarantee. Victims come from other, borrowing queues only.
        Reclaims already under way (``granted``) count as usage. Jobs of one
        queue and one shape get one answer until a charge or a grant.
        """
        tracked = self.ledger.queues.tracked
        if not tracked:
            return None
        request = self.estimate(job)
        state = (self.ledger.version, self._grants)
        if self._rules_at != state:
            self._rules.clear()
            self._borrowers = None
            self._rules_at = state
        key = (job.queue, request)
        if key not in self._rules:
            self._rules[key] = self._reclaim_rule(job.queue, request)
        return self._rules[key]

    def _reclaim_rule(self, queue: str, request: Resources) -> Callable[[RunningJob], bool] | None:
        tracked = self.ledger.queues.tracked
        fair = self._fair_shares().get(queue, Resources())
        promised = self._promised.get(queue, Resources())
        after = self.ledger.usage(queue) + promised + request
        if any(after.get(r) > fair.get(r) for r in tracked):
            return None
        borrowing = self._borrowing() - {queue}
        if not borrowing:
            return None
        return lambda victim: victim.queue in borrowing

    def _borrowing(self) -> frozenset[str]:
        """The queues using more than their guarantee in a governed resource (kept with
        the reclaim answers)."""
        if self._borrowers is None:
            tracked = self.ledger.queues.tracked
            self._borrowers = frozenset(
                name
                for name, used in self.ledger.usages().items()
                if any(self.ledger.queues.get(name).borrowed(used).get(r) > 0 for r in tracked)
            )
        return self._borrowers

    def _fair_shares(self) -> dict[str, Resources]:
        if self._entitled is None:
            demand = dict(self.ledger.usages())
            for job in self._pending:
                demand[job.queue] = demand.get(job.queue, Resources()) + self.estimate(job)
            self._entitled = entitlements(self.ledger.queues, self.ledger.capacity, demand)
        return self._entitled

    def _eligible(self, model: str | None) -> Iterable[int]:
        if model not in self._sizes:  # distinct sizes: ``pending_usage`` reads the extremes
            self._sizes[model] = sorted(
                {
                    total
                    for name, total in self._gpus
                    if model is None or gpu_model_matches(model, name)
                }
            )
        return self._sizes[model]
