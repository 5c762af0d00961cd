"""Can a job *ever* run on this inventory? Checked at submit time (HTTP 422).

Unlike the cycle's filters, this ignores current allocations, node
availability and GPU health: a busy, unavailable or unhealthy node may come
back, so only what no amount of waiting can fix is reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpudock.core.inventory import gpu_model_matches
from gpudock.core.units import format_size
from gpudock.scheduler.snapshot import GpuView, JobRequest, NodeView


def _gpus(n: int, model: str | None) -> str:
    """``4 GPUs``, ``1 GPU``, ``4 H100 GPUs``."""
    label = f"{model} " if model else ""
    return f"{n} {label}{'GPU' if n == 1 else 'GPUs'}"


def never_fits(job: JobRequest, nodes: Sequence[NodeView]) -> str | None:
    """The reason ``job`` can never fit ``nodes`` even when all are idle, or None.

    Messages (one line, for humans)::

        needs 16 GPUs but no node has GPUs
        no node has GPU model H100 (have: A100-40GB)
        needs 16 GPUs but the largest node has 8
        needs 4 H100 GPUs but the largest node has 2 H100
        needs 100GiB per GPU but the largest GPU has 80GiB
        needs 4 GPUs with 20GiB but the largest node has 2 such GPUs

        needs 2 nodes (a gang) but the cluster has 1 node

    Counts are per node (a gang needs ``gpus`` on each of ``nodes`` nodes). CPU-only jobs
    (``gpus == 0``) always fit. Pure; O(total GPUs).
    """
    if job.nodes > 1 and job.nodes > len(nodes):
        count = f"{len(nodes)} node" + ("" if len(nodes) == 1 else "s")
        return f"needs {job.nodes} nodes (a gang) but the cluster has {count}"
    if job.gpus == 0:
        return None
    model = job.gpu_model
    if not any(n.gpus for n in nodes):
        return f"needs {_gpus(job.gpus, model)} but no node has GPUs"
    per_node = [_model_gpus(n, model) for n in nodes]
    if not any(per_node):
        have = sorted({g.name for n in nodes for g in n.gpus})
        return f"no node has GPU model {model} (have: {', '.join(have)})"
    if job.shared:
        return _never_fits_shared(job, per_node)
    most = max(len(gpus) for gpus in per_node)
    if most < job.gpus:
        suffix = f" {model}" if model else ""
        return f"needs {_gpus(job.gpus, model)} but the largest node has {most}{suffix}"
    return None


def _model_gpus(node: NodeView, model: str | None) -> list[GpuView]:
    if model is None:
        return list(node.gpus)
    return [g for g in node.gpus if gpu_model_matches(model, g.name)]


def _never_fits_shared(job: JobRequest, per_node: list[list[GpuView]]) -> str | None:
    """Shared jobs: is some GPU big enough, and are there enough big ones on one node?"""
    share = job.gpu_memory
    assert share is not None
    size = format_size(share)
    largest = max(g.memory_total for gpus in per_node for g in gpus)
    if largest < share:
        label = f"{job.gpu_model} " if job.gpu_model else ""
        return f"needs {size} per GPU but the largest {label}GPU has {format_size(largest)}"
    most = max(sum(1 for g in gpus if g.memory_total >= share) for gpus in per_node)
    if most < job.gpus:
        return (
            f"needs {_gpus(job.gpus, job.gpu_model)} with {size} "
            f"but the largest node has {most} such GPUs"
        )
    return None


def never_fits_cpus(
    job: JobRequest, nodes: Sequence[NodeView], host_cpus: Mapping[str, float]
) -> str | None:
    """Why ``job``'s ``cpus`` exceed every node's CPU capacity, or None.

    A node's capacity is its configured ``cpus``, else its host's CPU count from
    ``host_cpus`` (by node name). A node whose capacity is unknown may fit
    anything, so then nothing is refused. Message: ``needs 64 CPUs but the
    largest node has 16``. Pure.
    """
    if job.cpus is None or not nodes:
        return None
    capacities = []
    for node in nodes:
        capacity = node.cpus if node.cpus is not None else host_cpus.get(node.name)
        if capacity is None:
            return None
        capacities.append(capacity)
    largest = max(capacities)
    if job.cpus <= largest:
        return None
    return f"needs {job.cpus:g} CPUs but the largest node has {largest:g}"


def never_fits_memory(job: JobRequest, nodes: Sequence[NodeView]) -> str | None:
    """Why ``job``'s ``memory`` exceeds every node's memory, or None.

    A node that does not count memory (``host_memory`` None) may fit anything,
    so then nothing is refused. Message: ``needs 64GiB memory but the largest
    node has 16GiB``. Pure.
    """
    if job.memory is None or not nodes:
        return None
    capacities = [node.host_memory for node in nodes]
    if any(c is None for c in capacities):
        return None
    largest = max(c for c in capacities if c is not None)
    if job.memory <= largest:
        return None
    return f"needs {format_size(job.memory)} memory but the largest node has {format_size(largest)}"
