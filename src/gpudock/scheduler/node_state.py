"""One node's and one GPU's remaining capacity in a cycle, and what a job may use of them.

``NodeState`` and ``GpuState`` are the mutable copies of a ``NodeView`` and its
``GpuView``s that ``CycleState`` (``capacity.py``) makes on first use and
changes as it reserves; policies only read them. ``usable_now`` and
``matches_model`` say whether a job can take a GPU; ``left_after`` what a node
has left once it does (what the scorers rank by).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter

from gpudock.core.affinity import Taint
from gpudock.core.inventory import gpu_model_matches
from gpudock.scheduler.snapshot import GpuView, JobRequest, MigView, NodeView


@dataclass(slots=True)
class GpuState:
    """One GPU's remaining capacity during a cycle (a mutable copy of ``GpuView``)."""

    uuid: str
    index: int
    name: str
    memory_total: int
    used_memory: int
    exclusive: bool
    shared_jobs: int
    healthy: bool
    numa: int | None = None
    nvlink: int | None = None

    def __init__(
        self,
        uuid: str,
        index: int,
        name: str,
        memory_total: int,
        used_memory: int,
        exclusive: bool,
        shared_jobs: int,
        healthy: bool,
        numa: int | None = None,
        nvlink: int | None = None,
    ) -> None:
        # written out: dataclasses' generated ``__init__`` stays interpreted when compiled
        self.uuid = uuid
        self.index = index
        self.name = name
        self.memory_total = memory_total
        self.used_memory = used_memory
        self.exclusive = exclusive
        self.shared_jobs = shared_jobs
        self.healthy = healthy
        self.numa = numa
        self.nvlink = nvlink

    @classmethod
    def from_view(cls, view: GpuView) -> GpuState:
        return cls(
            view.uuid,
            view.index,
            view.name,
            view.memory_total,
            view.used_memory,
            view.exclusive,
            view.shared_jobs,
            view.healthy,
            view.numa,
            view.nvlink,
        )

    def copy(self) -> GpuState:
        """A copy to change on its own (``copy.copy``'s result, without its generic
        reduce-and-rebuild: preemption and reservations copy GPUs by the thousand)."""
        return GpuState(
            self.uuid,
            self.index,
            self.name,
            self.memory_total,
            self.used_memory,
            self.exclusive,
            self.shared_jobs,
            self.healthy,
            self.numa,
            self.nvlink,
        )

    @property
    def free_memory(self) -> int:
        return self.memory_total - self.used_memory

    @property
    def idle(self) -> bool:
        """Nobody holds it, exclusively or a share (the applier's exact test)."""
        return not self.exclusive and self.shared_jobs == 0 and self.used_memory == 0

    @property
    def shareable(self) -> bool:
        """Healthy and not held exclusively: shared jobs may take a share of it."""
        return self.healthy and not self.exclusive


@dataclass(slots=True)
class MigState:
    """One MIG device during a cycle (a mutable copy of ``MigView``): ``held`` once taken."""

    uuid: str
    parent: str
    profile: str
    memory_total: int
    held: bool
    healthy: bool

    @classmethod
    def from_view(cls, view: MigView) -> MigState:
        return cls(view.uuid, view.parent, view.profile, view.memory_total, view.held, view.healthy)

    @property
    def free(self) -> bool:
        """Healthy and held by no job: a MIG job of its profile may take it."""
        return self.healthy and not self.held


@dataclass(slots=True)
class NodeState:
    """One node's remaining capacity during a cycle.

    ``gpus`` is sorted by index. ``idle_gpus`` (healthy idle GPUs) and
    ``free_memory`` (free bytes on healthy GPUs not held exclusively) are
    kept equal to what ``refresh`` computes (``CycleState`` updates them for
    the GPUs it changes) so policies can read them in O(1).
    ``cpus`` is None when the node does not schedule CPUs; otherwise
    ``free_cpus`` is what jobs asking for CPUs may still take. Likewise
    ``host_memory`` and ``free_host_memory`` (bytes) for memory.
    """

    name: str
    available: bool
    unavailable_reason: str | None
    labels: tuple[tuple[str, str], ...]
    gpus: tuple[GpuState, ...]
    idle_gpus: int = 0
    free_memory: int = 0
    taints: tuple[Taint, ...] = ()
    cpus: float | None = None
    free_cpus: float = 0.0
    host_memory: int | None = None
    free_host_memory: int = 0
    migs: tuple[MigState, ...] = ()  # MIG devices, in the snapshot's order
    gpu_sharing: str | None = None  # how it shares a GPU (``NodeView.gpu_sharing``)
    cuda_version: str | None = None  # ``NodeView.cuda_version``
    driver_version: str | None = None  # ``NodeView.driver_version``
    out_of_service: tuple[tuple[int, str], ...] = ()  # ``NodeView.out_of_service``

    @classmethod
    def from_view(cls, view: NodeView) -> NodeState:
        gpus = tuple(
            [
                GpuState(
                    g.uuid,
                    g.index,
                    g.name,
                    g.memory_total,
                    g.used_memory,
                    g.exclusive,
                    g.shared_jobs,
                    g.healthy,
                    g.numa,
                    g.nvlink,
                )
                for g in sorted(view.gpus, key=_by_index)
            ]
        )  # GpuState.from_view, inlined: a cycle copies every node it places on
        free_cpus = 0.0 if view.cpus is None else view.cpus - view.used_cpus
        node = cls(
            view.name,
            view.available,
            view.unavailable_reason,
            view.labels,
            gpus,
            taints=view.taints,
            cpus=view.cpus,
            free_cpus=free_cpus,
            host_memory=view.host_memory,
            free_host_memory=(view.host_memory or 0) - view.used_host_memory,
            migs=tuple([MigState.from_view(m) for m in view.migs]) if view.migs else (),
            gpu_sharing=view.gpu_sharing,
            cuda_version=view.cuda_version,
            driver_version=view.driver_version,
            out_of_service=view.out_of_service,
        )
        node.refresh()
        return node

    def refresh(self) -> None:
        """Recompute the cached counters from ``gpus`` (O(GPUs on this node)).

        Counts ``healthy and idle`` GPUs and sums ``free_memory`` over
        ``shareable`` ones, in one pass.
        """
        idle = free = 0
        for g in self.gpus:
            if g.healthy and not g.exclusive:  # shareable
                free += g.memory_total - g.used_memory
                if g.shared_jobs == 0 and g.used_memory == 0:  # and idle
                    idle += 1
        self.idle_gpus, self.free_memory = idle, free


_by_index = attrgetter("index")

AnyGpu = GpuState | GpuView
"""A GPU as a cycle reads it: copied into its node's ``NodeState``, or still the snapshot's."""


@lru_cache(maxsize=4096)
def model_name_matches(wanted: str, gpu_name: str) -> bool:
    """``gpu_model_matches``, memoized: a GPU of product ``gpu_name`` is of model ``wanted``."""
    return gpu_model_matches(wanted, gpu_name)


def matches_model(job: JobRequest, gpu: AnyGpu) -> bool:
    """True when the job has no model constraint or ``gpu`` is of that model."""
    return job.gpu_model is None or model_name_matches(job.gpu_model, gpu.name)


def model_gpus(job: JobRequest, node: NodeState) -> list[GpuState]:
    """The node's GPUs of the job's model, healthy or not, by index."""
    if job.gpu_model is None:
        return list(node.gpus)
    return [g for g in node.gpus if matches_model(job, g)]


def usable_now(job: JobRequest, gpu: AnyGpu) -> bool:
    """Could ``gpu`` take (its part of) ``job`` right now?

    Exclusive jobs need a healthy idle GPU; shared jobs a healthy GPU that is
    not held exclusively and has at least the share free. The model is
    checked too.
    """
    if not gpu.healthy or gpu.exclusive:
        return False
    model = job.gpu_model
    if model is not None and not model_name_matches(model, gpu.name):
        return False
    share = job.gpu_memory
    if share is not None and job.gpus > 0:  # job.shared, inlined: this runs per GPU
        return gpu.memory_total - gpu.used_memory >= share
    return gpu.shared_jobs == 0 and gpu.used_memory == 0  # gpu.idle


def capacity_left(job: JobRequest, node: NodeState) -> float:
    """What the node would have left after taking ``job``; higher means emptier.

    Units: idle GPUs for whole-GPU and CPU-only jobs, GiB of shareable memory
    for shared jobs. Only compare values computed for the same job.
    """
    return left_after(job, node.idle_gpus, node.free_memory)


def left_after(job: JobRequest, idle_gpus: int, free_memory: int) -> float:
    """``capacity_left`` of a node with ``idle_gpus`` and ``free_memory`` (its ``NodeState``'s,
    or its ``NodeFit``'s ``idle_all`` and ``free_all``)."""
    share = job.gpu_memory
    if share is not None and job.gpus > 0:  # ``job.shared``
        return (free_memory - job.gpus * share) / 2**30
    return float(idle_gpus - job.gpus)
