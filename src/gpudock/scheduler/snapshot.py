"""Immutable inputs of one scheduling cycle, and the Plan it returns."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpudock.core.affinity import Taint, Toleration, Topology
from gpudock.core.job import PendingReason
from gpudock.queue.history import UsageHistory


@dataclass(frozen=True, slots=True)
class GpuView:
    """One GPU's identity and what is already allocated on it."""

    uuid: str
    index: int
    name: str  # product name, matched by ``gpu_model_matches``
    memory_total: int  # bytes
    used_memory: int = 0  # bytes held by shares, or memory_total when exclusive
    exclusive: bool = False  # held whole by one exclusive job
    shared_jobs: int = 0  # number of shared jobs holding a share
    healthy: bool = True
    numa: int | None = None  # NUMA node the GPU hangs off; None: unknown
    nvlink: int | None = None  # NVLink domain: GPUs with equal ids are all NVLink-connected

    @property
    def free_memory(self) -> int:
        return self.memory_total - self.used_memory

    @property
    def idle(self) -> bool:
        return not self.exclusive and self.shared_jobs == 0

    def with_job(self, memory_per_gpu: int | None, sign: int = 1) -> GpuView:
        """This GPU once a job takes it (``sign`` 1) or lets it go (-1).

        ``memory_per_gpu`` None: the job holds the GPU whole (exclusive, all
        its memory); else it holds a share of that many bytes. What the
        store's snapshot shows for the jobs a GPU holds; the simulator and
        benchmarks apply Plans with it.
        """
        if memory_per_gpu is None:
            taken = sign > 0
            return replace(self, exclusive=taken, used_memory=self.memory_total if taken else 0)
        return replace(
            self,
            used_memory=self.used_memory + sign * memory_per_gpu,
            shared_jobs=self.shared_jobs + sign,
        )


@dataclass(frozen=True, slots=True)
class MigView:
    """One MIG device: an allocatable unit of its parent GPU (in MIG mode), taken whole
    by one job that asks for its ``profile`` (``JobRequest.mig``)."""

    uuid: str
    parent: str  # the parent GPU's uuid
    profile: str  # e.g. "1g.10gb"
    memory_total: int  # bytes
    held: bool = False  # a job holds it
    healthy: bool = True  # it and its parent GPU are healthy and not cordoned


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    gpus: tuple[GpuView, ...]
    available: bool = True
    unavailable_reason: str | None = None
    labels: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs
    taints: tuple[Taint, ...] = ()  # jobs must tolerate every one to land here
    cpus: float | None = None  # CPU cores jobs may request here; None: CPUs are not counted
    used_cpus: float = 0.0  # cores held by the jobs placed here (those that asked for CPUs)
    host_memory: int | None = None  # memory bytes jobs may request here; None: not counted
    used_host_memory: int = 0  # memory held by the jobs placed here (those that asked for it)
    migs: tuple[MigView, ...] = ()  # MIG devices of the node's GPUs in MIG mode
    gpu_sharing: str | None = None  # exclusive | mps | time-slice (``GpuSharing``); None: unknown
    cuda_version: str | None = None  # the newest CUDA its driver supports ("12.4"); None: unknown
    driver_version: str | None = None  # its NVIDIA driver's version; None: unknown
    # GPUs out of service (not ``healthy``, not in MIG mode): (index, "quarantined: XID 48 …")
    out_of_service: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What the scheduler needs to know of one pending job.

    A MIG job (``mig``: a profile name) asks for one MIG device of that profile and no
    GPUs: its ``gpus`` is 0 here, whatever its spec says, so that every GPU rule sees a
    job that takes no GPU, whole or shared; the MIG device is its unit (``mig_capacity``).
    """

    id: int
    gpus: int
    submitted_at: float
    gpu_memory: int | None = None  # per-GPU share; None means whole GPUs
    gpu_model: str | None = None
    priority: int = 0
    queue: str = "default"
    user: str = ""
    nodes: int = 1  # a gang: ``gpus`` on each of ``nodes`` nodes, all or nothing
    cpus: float | None = None
    max_runtime: float | None = None  # seconds; bounds backfill and ETAs
    can_preempt: bool = True  # may priority-preempt: the server sets it only for a preempting class
    node_selector: tuple[tuple[str, str], ...] = ()  # sorted labels a node must carry
    tolerations: tuple[Toleration, ...] = ()
    topology: Topology | None = None  # all GPUs in one NVLink domain / NUMA node
    memory: int | None = None  # host memory bytes per node (the container's limit)
    held_by: str | None = None  # held back by this user (``scheduler/hold.py``)
    max_gpus: int | None = None  # elastic: ``gpus`` is the least, this the most (``elastic.py``)
    remaining: float | None = None  # expected seconds it runs once started (an estimate; None:
    # unknown): what a preemption for it delays its victims by (``preemption_rules.py``)
    mig: str | None = None  # a MIG profile: the job takes one MIG device of it
    gpu_compute: int | None = None  # a shared job's compute share, percent (MPS only)
    cuda_require: str | None = None  # its image's NVIDIA_REQUIRE_* (``ImageRequirements.text``)

    @property
    def shared(self) -> bool:
        return self.gpu_memory is not None and self.gpus > 0

    @property
    def elastic(self) -> bool:
        """An elastic job: it may get up to ``max_gpus`` whole GPUs on its node."""
        return self.max_gpus is not None and self.max_gpus > self.gpus


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job that holds GPUs now (ALLOCATED, STARTING or RUNNING)."""

    id: int
    queue: str
    priority: int
    node: str
    gpu_uuids: tuple[str, ...]
    memory_per_gpu: int | None  # None: whole GPUs
    started_at: float | None  # None until it runs
    submitted_at: float = 0.0
    max_runtime: float | None = None
    min_runtime: float | None = None
    preemptible: bool = True
    stopping: bool = False  # a stop (cancel, preemption, max_runtime) is already under way
    preempted_for: int | None = None  # the job it is being stopped for, if preempted
    user: str = ""
    cpus: float | None = None
    elastic: tuple[int, int] | None = None  # (min, max) GPUs of an ``elastic: restart`` job
    memory: int | None = None  # host memory bytes it holds on its node (``JobRequest.memory``)
    # what a preemption costs it and gains (``preemption_rules.py``):
    restart_cost: float | None = None  # declared seconds a restart costs; None: not declared
    checkpoint_interval: float | None = None  # it checkpoints every so many seconds of a run
    start_seconds: float | None = None  # measured: its current run took this long to start
    estimated_end: float | None = None  # when it is expected to end (an estimate); None: unknown
    mig: str | None = None  # the MIG device it holds (its uuid; then ``gpu_uuids`` is empty)


WorkloadEntry = tuple[int, int | None, float | None, int]
"""``(gpus, gpu_memory, cpus, count)``: ``count`` jobs of one shape (``JobRequest``'s fields)."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[NodeView, ...]
    pending: tuple[JobRequest, ...]
    running: tuple[RunningJob, ...] = ()
    queue_history: UsageHistory | None = None  # decayed per-queue usage, for fair share
    # the job mix placement keeps room for (``pricing.job_mix``); None: running + pending
    workload: tuple[WorkloadEntry, ...] | None = None


@dataclass(frozen=True, slots=True)
class Placement:
    """Put job ``job_id`` on ``gpu_uuids`` of ``node``.

    ``memory_per_gpu`` is the share taken on each GPU for shared jobs and None
    for exclusive (whole-GPU) jobs. ``mig``: the uuid of the MIG device a MIG job
    takes (it takes no GPU: ``gpu_uuids`` is empty; the job's devices are ``uuids``).
    """

    job_id: int
    node: str
    gpu_uuids: tuple[str, ...]
    memory_per_gpu: int | None = None
    mig: str | None = None

    @property
    def uuids(self) -> tuple[str, ...]:
        """The devices the job gets: its GPUs, or its MIG device."""
        return (self.mig,) if self.mig is not None else self.gpu_uuids


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """A multi-node gang: one Placement per node, on ``nodes`` distinct nodes, all or nothing."""

    job_id: int
    parts: tuple[Placement, ...]


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop running job ``victim_id`` (SIGTERM, grace, SIGKILL) so ``preemptor_id`` can run.

    The victim returns to PENDING, keeping its submit time.
    """

    victim_id: int
    preemptor_id: int
    reason: str
    # what it weighed (``preemption_rules.py``), recorded with its event; not part of its
    # identity (equal victims, preemptor and reason are the same preemption):
    cost: float | None = field(default=None, compare=False)  # charged to the victim, seconds
    gain: float | None = field(default=None, compare=False)  # expected, seconds; None: unbounded


@dataclass(frozen=True, slots=True)
class Resize:
    """Restart running elastic job ``job_id`` so that it can grow (``scheduler/elastic.py``).

    It holds ``from_gpus`` on ``node``, and ``to_gpus`` fit there now. The
    job stops, returns to PENDING without using a retry, and the next cycle
    places it again: at its minimum, grown to what is free then.
    """

    job_id: int
    node: str
    from_gpus: int
    to_gpus: int


@dataclass(frozen=True, slots=True)
class ReservedGpus:
    """GPUs ``gpus`` (indices) of ``node`` kept for pending job ``job_id`` (EASY backfill).

    ``start``: when it is expected to start there (epoch seconds), None when
    unknown (the running jobs it waits for have no ``max_runtime``).
    """

    job_id: int
    user: str
    node: str
    gpus: tuple[int, ...]
    start: float | None


@dataclass(slots=True)
class Plan:
    placements: list[Placement] = field(default_factory=list)
    pending: dict[int, list[PendingReason]] = field(default_factory=dict)
    preemptions: list[Preemption] = field(default_factory=list)
    gangs: list[GangPlacement] = field(default_factory=list)
    reservations: list[ReservedGpus] = field(default_factory=list)  # informative: the applier
    # ignores them; the controller publishes them for ``GET /v1/gpus``
    resizes: list[Resize] = field(default_factory=list)  # elastic jobs restarted to grow
