"""Test kit for the scheduler: fluent builders and a snapshot-in, Plan-out harness.

    job = make_job(1).gpus(2).gpu_memory("20GiB").model("H100").priority(10).build()
    node = make_node("n0").gpus(8, model="H100", memory="80GiB").exclusive(0).build()
    plan = run(make_snapshot([node], [job]), placement="spread")
    assert_placed(plan, 1, node="n0", gpus=[1, 2])
    assert_pending(plan, 2, contains="needs 4 GPUs")

Placement constraints, CPUs and GPU topology::

    make_node("n1").gpus(8).label("zone", "eu").taint("dedicated=ml").cpus(64, used=8)
    make_node("n2").gpus(8).topology(nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]], numa=[[0, 1, 2, 3]])
    make_job(2).gpus(4).selector("zone", "eu").tolerate("dedicated").cpus(8).topology("nvlink")

Host memory::

    make_node("n3").gpus(8).memory("512GiB", used="64GiB")
    make_job(3).gpus(0).memory("16GiB")

GPU uuids follow ``gpu_uuid(node, index)`` so assertions can speak in indices.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Literal

from gpudock.config import SchedulerConfig
from gpudock.core.affinity import Taint, Topology, parse_taint, parse_toleration
from gpudock.core.job import PendingReason
from gpudock.core.units import parse_size
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.cycle import schedule
from gpudock.scheduler.snapshot import (
    GpuView,
    JobRequest,
    MigView,
    NodeView,
    Placement,
    Plan,
    RunningJob,
    Snapshot,
)

GiB = 2**30
Size = str | int


def no_data() -> CycleState:
    """A cycle with no nodes and no plugin data: to call a scorer or picker on its own."""
    return CycleState(())


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


class JobBuilder:
    """Defaults: one whole GPU, priority 0, queue ``default``, submitted at 0."""

    def __init__(self, job_id: int) -> None:
        self._job = JobRequest(id=job_id, gpus=1, submitted_at=0.0)

    def gpus(self, n: int) -> JobBuilder:
        self._job = replace(self._job, gpus=n)
        return self

    def gpu_memory(self, size: Size) -> JobBuilder:
        """Make it a shared job holding ``size`` on each of its GPUs."""
        self._job = replace(self._job, gpu_memory=parse_size(size))
        return self

    def model(self, model: str) -> JobBuilder:
        self._job = replace(self._job, gpu_model=model)
        return self

    def priority(self, priority: int) -> JobBuilder:
        self._job = replace(self._job, priority=priority)
        return self

    def queue(self, queue: str) -> JobBuilder:
        self._job = replace(self._job, queue=queue)
        return self

    def user(self, user: str) -> JobBuilder:
        self._job = replace(self._job, user=user)
        return self

    def submitted(self, at: float) -> JobBuilder:
        self._job = replace(self._job, submitted_at=at)
        return self

    def max_runtime(self, seconds: float) -> JobBuilder:
        self._job = replace(self._job, max_runtime=seconds)
        return self

    def cannot_preempt(self) -> JobBuilder:
        self._job = replace(self._job, can_preempt=False)
        return self

    def nodes(self, n: int) -> JobBuilder:
        """A gang: ``gpus`` on each of ``n`` nodes."""
        self._job = replace(self._job, nodes=n)
        return self

    def selector(self, key: str, value: str) -> JobBuilder:
        """Only nodes labelled ``key=value`` (adds to the node selector)."""
        labels = dict(self._job.node_selector)
        labels[key] = value
        self._job = replace(self._job, node_selector=tuple(sorted(labels.items())))
        return self

    def tolerate(self, spec: str) -> JobBuilder:
        """Tolerate taints matching ``spec``: ``key=value[:effect]``, ``key`` or ``*``."""
        tolerations = (*self._job.tolerations, parse_toleration(spec))
        self._job = replace(self._job, tolerations=tolerations)
        return self

    def topology(self, level: Topology) -> JobBuilder:
        """Require all its GPUs in one NVLink domain (``nvlink``) or NUMA node (``numa``)."""
        self._job = replace(self._job, topology=level)
        return self

    def cpus(self, n: float) -> JobBuilder:
        self._job = replace(self._job, cpus=n)
        return self

    def memory(self, size: Size) -> JobBuilder:
        """Ask for ``size`` of the node's host memory."""
        self._job = replace(self._job, memory=parse_size(size))
        return self

    def elastic(self, low: int, high: int) -> JobBuilder:
        """An elastic job of ``low`` to ``high`` whole GPUs (``gpus: low-high``)."""
        self._job = replace(self._job, gpus=low, max_gpus=high)
        return self

    def remaining(self, seconds: float) -> JobBuilder:
        """Its expected run time, as a caller with estimates sets it (``preemption_rules``)."""
        self._job = replace(self._job, remaining=seconds)
        return self

    def mig(self, profile: str) -> JobBuilder:
        """Ask for one MIG device of ``profile`` (and so no GPU: ``JobRequest.mig``)."""
        self._job = replace(self._job, mig=profile, gpus=0, gpu_memory=None)
        return self

    def held_by(self, user: str) -> JobBuilder:
        """Held back from scheduling (``gpudock hold``) by ``user``."""
        self._job = replace(self._job, held_by=user)
        return self

    def build(self) -> JobRequest:
        return self._job


def make_job(job_id: int) -> JobBuilder:
    return JobBuilder(job_id)


class NodeBuilder:
    """A node; ``gpus()`` appends GPUs with the next indices (call it again to mix models).

    By default it has no taints, does not count CPUs or memory and has no GPU topology.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._gpus: list[GpuView] = []
        self._available = True
        self._reason: str | None = None
        self._labels: dict[str, str] = {}
        self._taints: list[Taint] = []
        self._cpus: float | None = None
        self._used_cpus = 0.0
        self._memory: int | None = None
        self._used_memory = 0
        self._nvlink: dict[int, int] = {}  # GPU index -> NVLink domain
        self._numa: dict[int, int] = {}  # GPU index -> NUMA node
        self._migs: list[MigView] = []

    def gpus(self, n: int, model: str = "A100-80GB", memory: Size = "80GiB") -> NodeBuilder:
        total = parse_size(memory)
        for _ in range(n):
            index = len(self._gpus)
            self._gpus.append(
                GpuView(
                    uuid=gpu_uuid(self._name, index), index=index, name=model, memory_total=total
                )
            )
        return self

    def exclusive(self, *indices: int) -> NodeBuilder:
        """Mark GPUs as held whole by an exclusive job."""
        for i in indices:
            gpu = self._gpus[i]
            self._gpus[i] = replace(gpu, exclusive=True, used_memory=gpu.memory_total)
        return self

    def shared(self, index: int, used: Size, jobs: int = 1) -> NodeBuilder:
        """Mark ``used`` bytes of GPU ``index`` as held by ``jobs`` shared jobs."""
        self._gpus[index] = replace(
            self._gpus[index], used_memory=parse_size(used), shared_jobs=jobs
        )
        return self

    def mig(self, index: int, *profiles: str, held: int = 0) -> NodeBuilder:
        """Put GPU ``index`` in MIG mode with one device of each of ``profiles`` (its
        first ``held`` held by jobs); the GPU itself then takes no whole or share job,
        as the store's snapshot shows it (unhealthy to the GPU rules)."""
        self._gpus[index] = replace(self._gpus[index], healthy=False)
        parent = self._gpus[index].uuid
        for slot, profile in enumerate(profiles):
            size = parse_size(profile.split(".")[1].removesuffix("gb").split("+")[0] + "GB")
            self._migs.append(
                MigView(f"MIG-{self._name}-{index}-{slot}", parent, profile, size, held=slot < held)
            )
        return self

    def unhealthy(self, *indices: int) -> NodeBuilder:
        for i in indices:
            self._gpus[i] = replace(self._gpus[i], healthy=False)
        return self

    def unavailable(self, reason: str | None = None) -> NodeBuilder:
        self._available, self._reason = False, reason
        return self

    def label(self, key: str, value: str) -> NodeBuilder:
        self._labels[key] = value
        return self

    def taint(self, spec: str) -> NodeBuilder:
        """Add a taint: ``key=value:NoSchedule``, ``key:NoSchedule`` or ``key=value``."""
        self._taints.append(parse_taint(spec))
        return self

    def cpus(self, n: float, used: float = 0) -> NodeBuilder:
        """Count ``n`` CPU cores here, ``used`` of them held by running jobs."""
        self._cpus, self._used_cpus = n, used
        return self

    def memory(self, size: Size, used: Size = 0) -> NodeBuilder:
        """Count ``size`` of host memory here, ``used`` of it held by running jobs."""
        self._memory, self._used_memory = parse_size(size), parse_size(used)
        return self

    def topology(
        self,
        nvlink: Sequence[Sequence[int]] = (),
        numa: Sequence[Sequence[int]] = (),
    ) -> NodeBuilder:
        """Group GPU indices: ``nvlink[i]`` is NVLink domain ``i``, ``numa[i]`` NUMA node ``i``.

        A GPU in no group keeps an unknown domain / NUMA node. Applied at
        ``build``, so GPUs may be added before or after.
        """
        for kind, groups in ((self._nvlink, nvlink), (self._numa, numa)):
            for group_id, members in enumerate(groups):
                for index in members:
                    kind[index] = group_id
        return self

    def build(self) -> NodeView:
        gpus = tuple(
            replace(g, nvlink=self._nvlink.get(g.index), numa=self._numa.get(g.index))
            if self._nvlink or self._numa
            else g
            for g in self._gpus
        )
        return NodeView(
            name=self._name,
            gpus=gpus,
            available=self._available,
            unavailable_reason=self._reason,
            labels=tuple(sorted(self._labels.items())),
            taints=tuple(self._taints),
            cpus=self._cpus,
            used_cpus=self._used_cpus,
            host_memory=self._memory,
            used_host_memory=self._used_memory,
            migs=tuple(self._migs),
        )


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


class RunningBuilder:
    """A running job holding GPUs; ``make_snapshot`` marks those GPUs as held."""

    def __init__(self, job_id: int) -> None:
        self._fields: dict[str, object] = {"id": job_id, "queue": "default", "priority": 0}
        self._indices: tuple[int, ...] = ()

    def on(self, node: str, *indices: int) -> RunningBuilder:
        self._fields["node"], self._indices = node, indices
        return self

    def share(self, size: Size) -> RunningBuilder:
        self._fields["memory_per_gpu"] = parse_size(size)
        return self

    def mig(self, node: str, gpu: int, slot: int) -> RunningBuilder:
        """It holds MIG device ``slot`` of GPU ``gpu`` of ``node`` (``NodeBuilder.mig``'s
        naming) and no GPU; ``make_snapshot`` marks the device held."""
        self._fields.update(node=node, mig=f"MIG-{node}-{gpu}-{slot}")
        self._indices = ()
        return self

    def priority(self, priority: int) -> RunningBuilder:
        self._fields["priority"] = priority
        return self

    def queue(self, queue: str) -> RunningBuilder:
        self._fields["queue"] = queue
        return self

    def user(self, user: str) -> RunningBuilder:
        self._fields["user"] = user
        return self

    def started(self, at: float) -> RunningBuilder:
        self._fields["started_at"] = at
        return self

    def max_runtime(self, seconds: float) -> RunningBuilder:
        self._fields["max_runtime"] = seconds
        return self

    def min_runtime(self, seconds: float) -> RunningBuilder:
        self._fields["min_runtime"] = seconds
        return self

    def not_preemptible(self) -> RunningBuilder:
        self._fields["preemptible"] = False
        return self

    def elastic(self, low: int, high: int) -> RunningBuilder:
        """An ``elastic: restart`` job of ``low`` to ``high`` GPUs (it holds ``on``'s)."""
        self._fields["elastic"] = (low, high)
        return self

    def cpus(self, n: float) -> RunningBuilder:
        """It holds ``n`` CPU cores of its node."""
        self._fields["cpus"] = float(n)
        return self

    def memory(self, size: Size) -> RunningBuilder:
        """It holds ``size`` of its node's host memory (``make_snapshot`` counts it used)."""
        self._fields["memory"] = parse_size(size)
        return self

    def restart_cost(self, seconds: float) -> RunningBuilder:
        """It declares what a restart costs it."""
        self._fields["restart_cost"] = seconds
        return self

    def checkpoint_interval(self, seconds: float) -> RunningBuilder:
        """It checkpoints every ``seconds`` of a run: a preemption loses the run since."""
        self._fields["checkpoint_interval"] = seconds
        return self

    def start_seconds(self, seconds: float) -> RunningBuilder:
        """Its current run took ``seconds`` to start (measured)."""
        self._fields["start_seconds"] = seconds
        return self

    def ends_at(self, at: float) -> RunningBuilder:
        """It is expected to end at ``at``, as a caller with estimates says."""
        self._fields["estimated_end"] = at
        return self

    def stopping_for(self, job_id: int) -> RunningBuilder:
        self._fields.update(stopping=True, preempted_for=job_id)
        return self

    def build(self) -> RunningJob:
        node = str(self._fields["node"])
        fields = {"memory_per_gpu": None, "started_at": 0.0, **self._fields}
        uuids = tuple(gpu_uuid(node, i) for i in self._indices)
        return RunningJob(gpu_uuids=uuids, **fields)  # type: ignore[arg-type]


def make_running(job_id: int) -> RunningBuilder:
    return RunningBuilder(job_id)


def make_snapshot(
    nodes: Iterable[NodeView | NodeBuilder],
    jobs: Iterable[JobRequest | JobBuilder],
    now: float = 0,
    running: Iterable[RunningJob | RunningBuilder] = (),
) -> Snapshot:
    """Builders are built for you; GPUs and MIG devices of ``running`` jobs are marked held
    on their nodes, and their host memory used on nodes that count it."""
    held = tuple(r.build() if isinstance(r, RunningBuilder) else r for r in running)
    views = [n.build() if isinstance(n, NodeBuilder) else n for n in nodes]
    return Snapshot(
        now=now,
        nodes=tuple(_hold(view, held) for view in views),
        pending=tuple(j.build() if isinstance(j, JobBuilder) else j for j in jobs),
        running=held,
    )


def _hold(view: NodeView, running: Sequence[RunningJob]) -> NodeView:
    gpus = {g.uuid: g for g in view.gpus}
    for job in running:
        for uuid in job.gpu_uuids:
            gpu = gpus.get(uuid)
            if gpu is not None:
                gpus[uuid] = gpu.with_job(job.memory_per_gpu)
    used = view.used_host_memory
    if view.host_memory is not None:
        used += sum(job.memory or 0 for job in running if job.node == view.name)
    taken = {job.mig for job in running if job.mig is not None}
    migs = tuple(replace(m, held=True) if m.uuid in taken else m for m in view.migs)
    return replace(
        view, gpus=tuple(gpus[g.uuid] for g in view.gpus), used_host_memory=used, migs=migs
    )


def run(
    snapshot: Snapshot,
    config: SchedulerConfig | None = None,
    *,
    placement: Literal["binpack", "spread"] | None = None,
) -> Plan:
    """Run one cycle; ``placement`` overrides ``config.placement``."""
    config = config or SchedulerConfig()
    if placement is not None:
        config = config.model_copy(update={"placement": placement})
    return schedule(snapshot, config)


def placement_of(plan: Plan, job_id: int) -> Placement | None:
    found = [p for p in plan.placements if p.job_id == job_id]
    assert len(found) <= 1, f"job {job_id} placed {len(found)} times"
    return found[0] if found else None


def gpu_indices(placement: Placement) -> list[int]:
    """The indices behind ``gpu_uuid``-style uuids."""
    return [int(u.rsplit("-", 1)[1]) for u in placement.gpu_uuids]


def assert_placed(
    plan: Plan,
    job_id: int,
    node: str | None = None,
    gpus: Sequence[int] | None = None,
    memory: Size | None = None,
) -> Placement:
    """The job is placed (and not pending), on ``node`` / GPU indices ``gpus`` if given."""
    placement = placement_of(plan, job_id)
    assert placement is not None, f"job {job_id} not placed: {plan.pending.get(job_id)}"
    assert job_id not in plan.pending, f"job {job_id} placed and pending"
    if node is not None:
        assert placement.node == node, f"job {job_id} on {placement.node}, expected {node}"
    if gpus is not None:
        assert gpu_indices(placement) == list(gpus), (
            f"job {job_id} on GPUs {gpu_indices(placement)}, expected {list(gpus)}"
        )
    if memory is not None:
        assert placement.memory_per_gpu == parse_size(memory)
    return placement


def assert_pending(
    plan: Plan,
    job_id: int,
    contains: str | None = None,
    *,
    layer: str | None = None,
    exact: str | None = None,
) -> list[PendingReason]:
    """The job is pending (not placed) with a reason matching all criteria given."""
    assert placement_of(plan, job_id) is None, f"job {job_id} was placed"
    reasons = plan.pending.get(job_id)
    assert reasons, f"job {job_id} has no pending reasons"
    texts = [f"[{r.layer}] {r.message}" for r in reasons]
    matching = [
        r
        for r in reasons
        if (contains is None or contains in r.message)
        and (layer is None or r.layer == layer)
        and (exact is None or r.message == exact)
    ]
    assert matching, f"job {job_id}: no reason matches; got {texts}"
    return reasons
