"""The capacity model's rules: when a node has room for a job now, and whether it ever could.

The capacity model (``capacity.py``) takes GPUs, CPUs and host memory for the jobs it
places. These are its rules, one per ``Resource``, stated on the few numbers that
summarise a node: a ``NodeFit`` for GPUs (``node_fit.py``), a count and what is free for
CPUs and memory. The capacity filters (``policies/gpu_capacity.py``,
``cpu_capacity.py``, ``memory_capacity.py``, ``gpu_topology.py``) are these rules with
their wording, and declare so (``declarations.Needs``); an accelerator answers the same
rules from its own summaries of the nodes (buckets, ``release.Release``). One
definition, read by both: what a filter checks and what an index assumes cannot drift
apart.

Each rule has a *now* half (room on the node as it is) and an *ever* half (room were
every job on it gone). A filter says ``UNRESOLVABLE`` when *ever* fails and
``UNSCHEDULABLE`` when only *now* does.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from gpudock.scheduler.node_fit import ANY_MODEL, ModelClass, NodeFit, node_fit
from gpudock.scheduler.node_state import AnyGpu, NodeState, matches_model, usable_now
from gpudock.scheduler.snapshot import JobRequest
from gpudock.scheduler.topology import largest_group

__all__ = [
    "CPU_EPSILON",
    "Resource",
    "cpus_ever",
    "cpus_now",
    "gpu_counts",
    "gpus_empty",
    "gpus_ever",
    "gpus_fit",
    "gpus_now",
    "group_empty",
    "group_ever",
    "group_now",
    "memory_ever",
    "memory_now",
    "model_class",
    "model_fit",
    "needs_group",
]

CPU_EPSILON = 1e-9
"""CPUs are compared with this slack (``CycleState.reserve`` uses it too)."""


class Resource(Enum):
    """What a capacity rule counts.

    ``GPUS``: GPUs of the job's model that can take it: healthy idle ones for whole GPUs,
    healthy ones not held whole with the share free for a share (``usable_now``).
    ``GPU_GROUP``: those in one NVLink domain or NUMA node, for a job with ``topology``
    and two GPUs or more. ``CPUS``, ``HOST_MEMORY``: on nodes that count them, for jobs
    that ask for them.
    """

    GPUS = "gpus"
    GPU_GROUP = "gpu_group"
    CPUS = "cpus"
    HOST_MEMORY = "host_memory"


def model_class(job: JobRequest, gpus: Sequence[AnyGpu]) -> ModelClass:
    """The product names among ``gpus`` that ``job``'s model matches; ``ANY_MODEL`` when it
    sets none."""
    if job.gpu_model is None:
        return ANY_MODEL
    return frozenset(g.name for g in gpus if matches_model(job, g))


def model_fit(job: JobRequest, gpus: Sequence[AnyGpu]) -> NodeFit:
    """The ``NodeFit`` of a node's ``gpus`` for ``job``'s model class (what ``GPUS`` reads)."""
    return node_fit(gpus, model_class(job, gpus))


def gpus_ever(job: JobRequest, fit: NodeFit) -> int:
    """GPUs of the class that could take the job were the node idle: all of them for whole
    GPUs, those at least the share's size for a share."""
    share = job.gpu_memory
    if share is None or job.gpus == 0:
        return fit.total
    return _at_least(fit.sizes, share)


def gpus_now(job: JobRequest, fit: NodeFit) -> int:
    """GPUs of the class that can take the job now: idle ones for whole GPUs, those with the
    share free for a share."""
    share = job.gpu_memory
    if share is None or job.gpus == 0:
        return fit.idle
    return _at_least(fit.frees, share)


def gpu_counts(job: JobRequest, node: NodeState) -> tuple[int, int]:
    """``(gpus_ever, gpus_now)`` of ``node`` for ``job``: from the node's counters for whole
    GPUs of any model (its ``NodeFit`` would say the same), else from its ``model_fit``."""
    if job.gpu_memory is None and job.gpu_model is None:
        return len(node.gpus), node.idle_gpus
    fit = model_fit(job, node.gpus)
    return gpus_ever(job, fit), gpus_now(job, fit)


def gpus_fit(job: JobRequest, fit: NodeFit) -> bool:
    """``GPUS`` holds: ``job.gpus`` GPUs of the class could ever take it and can now (a
    CPU-only job always fits). For a share, iff ``fit.shared_level(job.gpus) >= share``."""
    gpus = job.gpus
    return gpus == 0 or (gpus_now(job, fit) >= gpus and gpus_ever(job, fit) >= gpus)


def gpus_empty(job: JobRequest, gpus: Sequence[AnyGpu]) -> int:
    """``gpus_now`` of the node with every job gone (``post_filter.emptied``): its healthy
    GPUs of the job's model (at least the share's size, for a share)."""
    share = job.gpu_memory if job.gpus > 0 else None
    return sum(
        1
        for g in gpus
        if g.healthy and matches_model(job, g) and (share is None or g.memory_total >= share)
    )


def needs_group(job: JobRequest) -> bool:
    """``GPU_GROUP`` applies: the job sets ``topology`` and asks for two GPUs or more."""
    return job.topology is not None and job.gpus >= 2


def group_now(job: JobRequest, gpus: Sequence[AnyGpu]) -> int:
    """The most GPUs of the job's model usable now in one group at its ``topology`` level."""
    assert job.topology is not None
    usable = [g for g in gpus if usable_now(job, g)]
    return largest_group(usable, job.topology)


def group_ever(job: JobRequest, gpus: Sequence[AnyGpu]) -> int:
    """The most GPUs of the job's model, healthy or not, in one group at its level."""
    assert job.topology is not None
    model = [g for g in gpus if matches_model(job, g)]
    return largest_group(model, job.topology)


def group_empty(job: JobRequest, gpus: Sequence[AnyGpu]) -> int:
    """``group_now`` of the node with every job gone."""
    assert job.topology is not None
    share = job.gpu_memory
    usable = [
        g
        for g in gpus
        if g.healthy and matches_model(job, g) and (share is None or g.memory_total >= share)
    ]
    return largest_group(usable, job.topology)


def cpus_now(job: JobRequest, cpus: float | None, free: float) -> bool:
    """The node does not count CPUs (``cpus`` None), the job asks for none, or ``free`` holds
    them."""
    return not job.cpus or cpus is None or job.cpus <= free + CPU_EPSILON


def cpus_ever(job: JobRequest, cpus: float | None) -> bool:
    """``cpus_now`` of the node with every core free."""
    return not job.cpus or cpus is None or cpus + CPU_EPSILON >= job.cpus


def memory_now(job: JobRequest, memory: int | None, free: int) -> bool:
    """The node does not count host memory (``memory`` None), the job asks for none, or
    ``free`` bytes hold it."""
    want = job.memory
    return not want or memory is None or want <= free


def memory_ever(job: JobRequest, memory: int | None) -> bool:
    """``memory_now`` of the node with all its memory free."""
    want = job.memory
    return not want or memory is None or memory >= want


def _at_least(descending: Sequence[int], value: int) -> int:
    """How many leading items of ``descending`` are at least ``value``."""
    count = 0
    for item in descending:
        if item < value:
            break
        count += 1
    return count
