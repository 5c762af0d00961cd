"""Inventory: nodes, GPUs and allocations."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class GpuHealth(StrEnum):
    OK = "ok"
    UNHEALTHY = "unhealthy"
    MISSING = "missing"  # was known, no longer reported by discovery


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU as discovery reports it (NVML, or the emulator)."""

    index: int
    uuid: str
    name: str  # full product name, e.g. "NVIDIA H100 80GB HBM3"
    memory_total: int  # bytes
    mig_mode: bool | None = None  # None when unknown / unsupported
    emulated: bool = False
    health: GpuHealth = GpuHealth.OK


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """Everything discovery knows about the local host."""

    name: str
    gpus: tuple[GpuInfo, ...]
    driver_version: str | None = None
    cuda_version: str | None = None
    source: str = "none"  # "nvml", "emulated" or "none"
    note: str | None = None  # one human line, e.g. why NVML is unavailable


class NodeStatus(StrEnum):
    AVAILABLE = "available"
    UNAVAILABLE = "unavailable"


@dataclass(slots=True)
class Gpu:
    """A GPU row in the store: identity plus what is allocated on it."""

    uuid: str
    node: str
    index: int
    name: str
    memory_total: int
    mig_mode: bool | None
    emulated: bool
    health: GpuHealth
    used_memory: int = 0  # sum of shares, or memory_total when held exclusively
    exclusive_job: int | None = None
    shared_jobs: int = 0
    version: int = 0

    @property
    def free_memory(self) -> int:
        return self.memory_total - self.used_memory

    @property
    def idle(self) -> bool:
        return self.exclusive_job is None and self.shared_jobs == 0


@dataclass(slots=True)
class Node:
    name: str
    status: NodeStatus
    status_reason: str | None
    driver_version: str | None
    cuda_version: str | None
    gpu_source: str
    last_seen: float
    labels: dict[str, str] = field(default_factory=dict)
    gpus: list[Gpu] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Allocation:
    """The GPUs one job holds. ``memory_per_gpu`` is None for exclusive GPUs."""

    job_id: int
    node: str
    gpu_uuids: tuple[str, ...]
    memory_per_gpu: int | None


def gpu_model_matches(wanted: str, gpu_name: str) -> bool:
    """True when ``wanted`` (e.g. ``H100`` or ``a100-80gb``) names ``gpu_name``.

    Matching ignores case, spaces, dashes and a leading ``NVIDIA``, and is a
    substring test, so ``A100`` matches both ``A100-40GB`` and
    ``NVIDIA A100-SXM4-80GB``.
    """
    return _norm_model(wanted) in _norm_model(gpu_name)


def _norm_model(text: str) -> str:
    norm = text.upper().replace("NVIDIA", "")
    return "".join(ch for ch in norm if ch.isalnum())
