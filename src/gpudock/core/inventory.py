"""Inventory: nodes, GPUs and allocations.

Topology of a GPU: ``numa`` is the host NUMA node it hangs off and
``nvlink`` its NVLink domain (GPUs with equal ids are connected by NVLink);
either is None when unknown or absent. What an admin declares about a node
(labels, taints, CPU cores offered to jobs) is ``NodeTraits``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache


class GpuHealth(StrEnum):
    """Only an ``ok`` GPU takes new placements.

    ``quarantined`` (a health event said it needs a reset) and ``cordoned``
    (an admin took it out) stick until an admin uncordons the GPU; discovery
    never clears them.
    """

    OK = "ok"
    UNHEALTHY = "unhealthy"  # discovery's queries of it failed
    MISSING = "missing"  # was known, no longer reported by discovery
    QUARANTINED = "quarantined"
    CORDONED = "cordoned"

    @property
    def sticky(self) -> bool:
        """Set by a health event or an admin; only ``gpudock gpu uncordon`` clears it."""
        return self in (GpuHealth.QUARANTINED, GpuHealth.CORDONED)


class GpuSharing(StrEnum):
    """How a node shares a GPU between jobs (``executor.sharing``, or detected)."""

    EXCLUSIVE = "exclusive"  # one job per GPU: shares are not offered
    MPS = "mps"  # an MPS control daemon runs: memory and compute limits hold in the driver
    TIME_SLICE = "time-slice"  # shares time-slice the GPU; memory is watched, not capped


DEFAULT_GPU_MEMORY_RESERVE = 512 * 1024**2
"""GPU memory held back from shares on every GPU (``node.gpu_memory_reserve``)."""


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
    numa: int | None = None  # host NUMA node; None: unknown
    nvlink: int | None = None  # NVLink domain id; None: no NVLink peer (or unknown)
    brand: str | None = None  # the container toolkit's brand name: "tesla", "nvidia"...
    arch: str | None = None  # CUDA compute capability, e.g. "9.0"


@dataclass(frozen=True, slots=True)
class MigDeviceInfo:
    """One MIG device as NVML reports it: a slice of GPU ``parent_uuid``.

    ``slot`` is its position among the parent's MIG devices (the index
    ``nvmlDeviceGetMigDeviceHandleByIndex`` takes); ``gpu_instance`` and
    ``compute_instance`` are the ids ``nvidia-smi mig -lgi``/``-lci`` show.
    """

    uuid: str  # "MIG-..."
    parent_uuid: str
    slot: int
    profile: str  # e.g. "1g.10gb"
    memory_total: int  # bytes
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """Everything discovery knows about the local host."""

    name: str
    gpus: tuple[GpuInfo, ...]
    driver_version: str | None = None
    cuda_version: str | None = None
    source: str = "none"  # "nvml", "emulated" or "none"
    note: str | None = None  # one human line, e.g. why NVML is unavailable
    mig_devices: tuple[MigDeviceInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeTraits:
    """What the admin declares about a node (server config ``node:``).

    ``taints`` are canonical strings (``str(Taint)``, e.g. ``gpu=a:NoSchedule``);
    ``cpus`` is the number of CPU cores jobs may request there, None when CPUs
    are not scheduled; ``memory`` the host memory bytes, None when not counted;
    ``gpu_memory_reserve`` the bytes of each GPU that shares never take;
    ``gpu_sharing`` how its GPUs are shared (None: not known yet).
    """

    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] = ()
    cpus: float | None = None
    memory: int | None = None
    gpu_memory_reserve: int = DEFAULT_GPU_MEMORY_RESERVE
    gpu_sharing: GpuSharing | None = None


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
    numa: int | None = None
    nvlink: int | None = None
    memory_reserved: int = 0  # bytes shares never take (``node.gpu_memory_reserve``)
    health_reason: str | None = None  # why it is not ok, e.g. the XID that quarantined it
    brand: str | None = None
    arch: str | None = None

    @property
    def free_memory(self) -> int:
        return self.memory_total - self.used_memory

    @property
    def share_capacity(self) -> int:
        """The memory shares may take in all: its memory less the reserve."""
        return self.memory_total - self.memory_reserved

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
    taints: list[str] = field(default_factory=list)  # canonical, e.g. "gpu=a:NoSchedule"
    cpus: float | None = None  # cores offered to jobs; None: CPUs are not scheduled
    cpus_used: float = 0.0  # cores requested by the jobs holding resources here
    memory: int | None = None  # host memory bytes offered to jobs; None: not counted
    memory_used: int = 0  # bytes requested by the jobs holding resources here
    # A node of a multi-node engine (Swarm); None on the docker backend (core/cluster.py)
    engine_state: str | None = None  # ready | down | unknown | disconnected | removed
    availability: str | None = None  # active | pause | drain
    down_since: float | None = None
    agent_seen_at: float | None = None  # its agent's last report
    fencing: bool = False  # back after a loss: waits for its agent to confirm fencing
    agent: str | None = None  # watched (agent reporting), silent, unwatched (never had one)
    gpu_sharing: str | None = None  # GpuSharing value; None: not known
    mig_devices: list[MigDevice] = field(default_factory=list)


@dataclass(slots=True)
class MigDevice:
    """A MIG device row in the store. ``job`` is the job holding it (phase B places
    MIG jobs; until then always None)."""

    uuid: str
    node: str
    parent_uuid: str
    slot: int
    profile: str
    memory_total: int
    gpu_instance: int | None
    compute_instance: int | None
    job: int | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """The GPUs one job holds. ``memory_per_gpu`` is None for exclusive GPUs."""

    job_id: int
    node: str
    gpu_uuids: tuple[str, ...]
    memory_per_gpu: int | None


@lru_cache(maxsize=4096)
def gpu_model_matches(wanted: str, gpu_name: str) -> bool:
    """True when ``wanted`` (e.g. ``H100`` or ``a100-80gb``) names ``gpu_name``.

    Both are split into words at anything not a letter or digit, ignoring
    case and the word ``NVIDIA``. Each word of ``wanted`` must be a word of
    the name, or several consecutive words of it written together, or the
    start of one when the word ends in a digit and the name goes on with a
    letter (a variant: ``V100`` matches ``V100S``, ``A10`` ``A10G``, ``80``
    ``80GB``). So ``A100`` and ``a100-80gb`` match ``NVIDIA A100-SXM4-80GB``
    and ``rtx4090`` matches ``NVIDIA GeForce RTX 4090``, but a model number
    is never cut: ``H20`` does not match ``NVIDIA H200``, ``A10`` not
    ``NVIDIA A100-SXM4-80GB``, ``L4`` not ``NVIDIA L40S``, and ``H200`` not
    ``NVIDIA GH200 480GB``: those are other products. A ``wanted`` without
    any word matches every GPU.
    """
    words = _model_words(gpu_name)
    runs = ["".join(words[i:j]) for i in range(len(words)) for j in range(i + 1, len(words) + 1)]
    return all(any(_names(word, run) for run in runs) for word in _model_words(wanted))


def _names(word: str, run: str) -> bool:
    """``word`` is ``run``, or the start of it up to a digit followed by a letter."""
    if not run.startswith(word):
        return False
    return len(run) == len(word) or (word[-1].isdigit() and run[len(word)].isalpha())


def _model_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[A-Z0-9]+", text.upper()) if w != "NVIDIA"]
