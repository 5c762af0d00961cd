"""Immutable inputs of one scheduling cycle, and the Plan it returns."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudock.core.job import PendingReason


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

    @property
    def free_memory(self) -> int:
        return self.memory_total - self.used_memory

    @property
    def idle(self) -> bool:
        return not self.exclusive and self.shared_jobs == 0


@dataclass(frozen=True, slots=True)
class NodeView:
    name: str
    gpus: tuple[GpuView, ...]
    available: bool = True
    unavailable_reason: str | None = None
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class JobRequest:
    """What the scheduler needs to know of one pending job."""

    id: int
    gpus: int
    submitted_at: float
    gpu_memory: int | None = None  # per-GPU share; None means whole GPUs
    gpu_model: str | None = None
    priority: int = 0
    queue: str = "default"
    user: str = ""

    @property
    def shared(self) -> bool:
        return self.gpu_memory is not None and self.gpus > 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[NodeView, ...]
    pending: tuple[JobRequest, ...]


@dataclass(frozen=True, slots=True)
class Placement:
    """Put job ``job_id`` on ``gpu_uuids`` of ``node``.

    ``memory_per_gpu`` is the share taken on each GPU for shared jobs and None
    for exclusive (whole-GPU) jobs.
    """

    job_id: int
    node: str
    gpu_uuids: tuple[str, ...]
    memory_per_gpu: int | None = None


@dataclass(slots=True)
class Plan:
    placements: list[Placement] = field(default_factory=list)
    pending: dict[int, list[PendingReason]] = field(default_factory=dict)
