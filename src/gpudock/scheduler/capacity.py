"""The cycle's mutable capacity model: what is still free while a cycle places jobs.

The ``Snapshot`` is frozen; a cycle copies it once into ``CycleState`` and
every reservation updates that copy, so a job placed early in the cycle
reduces the capacity later jobs see. Nothing here ever mutates the snapshot.

Policies only read this model; the cycle changes it only through
``CycleState.reserve``, which logs the node it changed so that cached
verdicts (``equivalence.py``) re-evaluate just that node.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from gpudock.core.inventory import gpu_model_matches
from gpudock.scheduler.snapshot import GpuView, JobRequest, NodeView, Placement


class ReservationError(ValueError):
    """A picker chose GPUs that cannot hold the job; the capacity model is unchanged."""


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

    @classmethod
    def from_view(cls, view: GpuView) -> GpuState:
        return cls(
            uuid=view.uuid,
            index=view.index,
            name=view.name,
            memory_total=view.memory_total,
            used_memory=view.used_memory,
            exclusive=view.exclusive,
            shared_jobs=view.shared_jobs,
            healthy=view.healthy,
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
class NodeState:
    """One node's remaining capacity during a cycle.

    ``gpus`` is sorted by index. ``idle_gpus`` (healthy idle GPUs) and
    ``free_memory`` (free bytes on healthy GPUs not held exclusively) are
    maintained by ``refresh`` so policies can read them in O(1).
    """

    name: str
    available: bool
    unavailable_reason: str | None
    labels: tuple[tuple[str, str], ...]
    gpus: tuple[GpuState, ...]
    idle_gpus: int = 0
    free_memory: int = 0

    @classmethod
    def from_view(cls, view: NodeView) -> NodeState:
        gpus = tuple(GpuState.from_view(g) for g in sorted(view.gpus, key=lambda g: g.index))
        node = cls(
            name=view.name,
            available=view.available,
            unavailable_reason=view.unavailable_reason,
            labels=view.labels,
            gpus=gpus,
        )
        node.refresh()
        return node

    def refresh(self) -> None:
        """Recompute the cached counters from ``gpus`` (O(GPUs on this node))."""
        self.idle_gpus = sum(1 for g in self.gpus if g.healthy and g.idle)
        self.free_memory = sum(g.free_memory for g in self.gpus if g.shareable)


@lru_cache(maxsize=4096)
def _model_matches(wanted: str, gpu_name: str) -> bool:
    return gpu_model_matches(wanted, gpu_name)


def matches_model(job: JobRequest, gpu: GpuState) -> bool:
    """True when the job has no model constraint or ``gpu`` is of that model."""
    return job.gpu_model is None or _model_matches(job.gpu_model, gpu.name)


def model_gpus(job: JobRequest, node: NodeState) -> list[GpuState]:
    """The node's GPUs of the job's model, healthy or not, by index."""
    if job.gpu_model is None:
        return list(node.gpus)
    return [g for g in node.gpus if matches_model(job, g)]


def usable_now(job: JobRequest, gpu: GpuState) -> bool:
    """Could ``gpu`` take (its part of) ``job`` right now?

    Exclusive jobs need a healthy idle GPU; shared jobs a healthy GPU that is
    not held exclusively and has at least the share free. The model is
    checked too.
    """
    if not gpu.healthy or not matches_model(job, gpu):
        return False
    if job.shared:
        assert job.gpu_memory is not None
        return not gpu.exclusive and gpu.free_memory >= job.gpu_memory
    return gpu.idle


def capacity_left(job: JobRequest, node: NodeState) -> float:
    """What the node would have left after taking ``job``; higher means emptier.

    Units: idle GPUs for whole-GPU and CPU-only jobs, GiB of shareable memory
    for shared jobs. Only compare values computed for the same job.
    """
    if job.shared:
        assert job.gpu_memory is not None
        return (node.free_memory - job.gpus * job.gpu_memory) / 2**30
    return float(node.idle_gpus - job.gpus)


class CycleState:
    """Per-cycle capacity of every node, by name.

    Only ``reserve`` changes capacity; ``changes`` logs the name of every node
    it changed, in order, so readers can catch up on what changed since.
    """

    def __init__(self, nodes: Iterable[NodeView]) -> None:
        self.nodes: dict[str, NodeState] = {}
        self.changes: list[str] = []
        for view in nodes:
            if view.name in self.nodes:
                raise ValueError(f"node {view.name!r} appears twice in the snapshot")
            self.nodes[view.name] = NodeState.from_view(view)

    def reserve(self, job: JobRequest, node_name: str, gpu_indices: Sequence[int]) -> Placement:
        """Take ``gpu_indices`` on ``node_name`` for ``job`` and return the Placement.

        Raises ``ReservationError`` (changing nothing) unless the GPUs are
        distinct, exist, are usable now by the job (``usable_now``), and number
        exactly ``job.gpus``.
        """
        node = self.nodes[node_name]
        by_index = {g.index: g for g in node.gpus}
        chosen = [by_index[i] for i in gpu_indices if i in by_index]
        if len(set(gpu_indices)) != job.gpus or len(chosen) != job.gpus:
            raise ReservationError(
                f"job {job.id} needs {job.gpus} distinct GPUs on {node_name}, "
                f"got indices {list(gpu_indices)}"
            )
        if not all(usable_now(job, g) for g in chosen):
            raise ReservationError(f"job {job.id} does not fit GPUs {list(gpu_indices)}")
        for gpu in chosen:
            if job.shared:
                assert job.gpu_memory is not None
                gpu.used_memory += job.gpu_memory
                gpu.shared_jobs += 1
            else:
                gpu.exclusive = True
                gpu.used_memory = gpu.memory_total
        node.refresh()
        self.changes.append(node_name)
        return Placement(
            job_id=job.id,
            node=node_name,
            gpu_uuids=tuple(g.uuid for g in chosen),
            memory_per_gpu=job.gpu_memory if job.shared else None,
        )
