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
    numa: int | None = None  # host NUMA node; None: unknown
    nvlink: int | None = None  # NVLink domain id; None: no NVLink peer (or unknown)


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """Everything discovery knows about the local host."""

    name: str
    gpus: tuple[GpuInfo, ...]
    driver_version: str | None = None
    cuda_version: str | None = None
    source: str = "none"  # "nvml", "emulated" or "none"
    note: str | None = None  # one human line, e.g. why NVML is unavailable


@dataclass(frozen=True, slots=True)
class NodeTraits:
    """What the admin declares about a node (server config ``node:``).

    ``taints`` are canonical strings (``str(Taint)``, e.g. ``gpu=a:NoSchedule``);
    ``cpus`` is the number of CPU cores jobs may request there, None when CPUs
    are not scheduled; ``memory`` the host memory bytes, None when not counted.
    """

    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] = ()
    cpus: float | None = None
    memory: int | None = None


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
