"""Score policy: pack jobs onto the fullest nodes, keeping whole nodes free for big jobs,
without stranding GPUs behind exhausted CPUs, and one-GPU shares where they spoil least.

How one-GPU shares are priced is the share-price plugin's (``policies/share_price/``):
its pre-score step writes each cycle's ``SharePricing`` into the ``CycleState``, where
``score`` reads it.
"""

from __future__ import annotations

from gpudock.scheduler.capacity import CycleState, capacity_left
from gpudock.scheduler.framework import NodeState
from gpudock.scheduler.policies.share_price.mix import priced
from gpudock.scheduler.policies.share_price.pricing import SharePricing
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
    leaving its free GPUs to no job that needs CPUs. Jobs without CPUs, and
    nodes without CPU counts, score exactly as plain best fit.

    With ``price_shares`` (the default; figures in ``benchmarks/RESULTS.md``), a
    share of one GPU on one node is
    scored by the job mix's share prices instead (``SharePricing.score``):
    first the GPU capacity it would strand for the mix's common shapes (if it
    asks for CPUs, on a node that counts them), then the worth its GPU loses
    at the cutting-stock prices of the mix's share sizes, then capacity left.
    The share-price plugin's pre-score step writes the cycle's ``SharePricing``
    into the ``CycleState`` (it does when some scorer ``reads`` it); without it
    such shares score as above.
    """

    name = "binpack"

    def __init__(self, cpu_aware: bool = True, price_shares: bool = True) -> None:
        self.cpu_aware = cpu_aware
        self.price_shares = price_shares
        self.reads: tuple[type, ...] = (SharePricing,) if price_shares else ()

    def pricing(self, state: CycleState) -> SharePricing | None:
        """The cycle's share prices, when this scorer places shares by them."""
        return state.read(SharePricing) if self.price_shares else None

    def score(self, job: JobRequest, node: NodeState, state: CycleState) -> float:
        pricing = self.pricing(state) if priced(job) else None
        if pricing is not None:
            return pricing.score(job, node)
        left = capacity_left(job, node)
        if not job.cpus or node.cpus is None or not self.cpu_aware:
            return -left
        return packed(left, stranded_after(job, node))


def packed(left: float, stranded: float) -> float:
    """``binpack``'s score under its CPU rule (the capacity index computes it too)."""
    return -STRANDED_FIRST * stranded - left


def stranded_after(job: JobRequest, node: NodeState) -> float:
    """``stranded_gpus`` of ``node`` as it is now."""
    if not node.gpus or node.cpus is None:
        return 0.0
    largest = max(g.memory_total for g in node.gpus)
    return stranded_gpus(job, node.cpus, len(node.gpus), largest, node.free_memory, node.free_cpus)


def stranded_gpus(
    job: JobRequest, cpus: float, gpus: int, largest: int, free_memory: int, free_cpus: float
) -> float:
    """A node's free GPU capacity, in GPUs, that its free CPUs could not feed once ``job``
    is placed there.

    The node has ``cpus`` CPUs (``free_cpus`` free) and ``gpus`` GPUs, the
    largest of ``largest`` bytes, with ``free_memory`` free bytes on the
    healthy GPUs not held exclusively (``NodeState.free_memory``). GPUs are
    counted in units of the largest (shares by their memory). Free CPUs feed
    free GPU capacity at ``ratio`` CPUs per GPU: the lower of the job's own
    ratio (its CPUs over the GPUs it takes) and the node's (its CPUs over its
    GPUs); the node's for a CPU-only job. The lower ratio counts capacity as
    stranded only when neither more jobs like this one nor jobs shaped like
    the node could use it. 0 when the node has no GPUs.
    """
    if gpus == 0 or largest <= 0:
        return 0.0
    ratio = cpus / gpus
    taken = 0
    if job.gpus > 0:
        taken = job.gpus * (job.gpu_memory if job.gpu_memory is not None else largest)
        ratio = min(ratio, (job.cpus or 0.0) * largest / taken)
    free_gpus = (free_memory - taken) / largest
    if ratio <= 0:
        return max(0.0, free_gpus)
    left_cpus = free_cpus - (job.cpus or 0.0)
    return max(0.0, free_gpus - max(0.0, left_cpus) / ratio)
