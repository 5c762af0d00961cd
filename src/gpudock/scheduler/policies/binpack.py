"""Score policy: pack jobs onto the fullest nodes, keeping whole nodes free for big jobs,
without stranding GPUs behind exhausted CPUs, and one-GPU shares where they spoil least.

How one-GPU shares are priced is the share-price plugin's (``policies/share_price/``):
its pre-score step writes each cycle's ``SharePricing`` into the ``CycleState``, where
``score`` reads it.

How it orders nodes it declares per job (``order``, ``declarations.Walked`` or
``Priced``): fewest capacity left first; under the CPU rule a node's score is
``room_score`` of its ``NodeRoom`` and ``cpu_ceiling`` bounds the nodes still to come.
``score`` is ``room_score`` of the node's room, so the declaration and the definition are
one function.
"""

from __future__ import annotations

from collections.abc import Callable

from gpudock.scheduler.capacity import CycleState, left_after
from gpudock.scheduler.declarations import NodeRoom, Priced, Shapes, Walked, room_of
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
        return room_score(job, room_of(node), self.cpu_aware)

    def order(self, job: JobRequest, state: CycleState) -> Walked | Priced:
        """How it orders nodes for ``job`` this cycle (``declarations``): by the share's
        price; else fewest capacity left first, exactly, or under the CPU rule by
        ``room_score`` with ``cpu_ceiling``."""
        pricing = self.pricing(state) if priced(job) else None
        if pricing is not None:
            return Priced(pricing.loss, pricing.judge)
        if not job.cpus or not self.cpu_aware:
            return Walked(fewest=True)
        aware = self.cpu_aware
        return Walked(
            True,
            lambda room: room_score(job, room, aware),
            lambda shapes: cpu_ceiling(job, shapes),
        )


def room_score(job: JobRequest, room: NodeRoom, cpu_aware: bool) -> float:
    """``Binpack.score`` of a node with ``room`` (no share prices): minus the capacity left;
    under the CPU rule, for a job asking for CPUs on a node that counts them, first minus
    ``STRANDED_FIRST`` per GPU ``stranded_gpus``."""
    left = left_after(job, room.idle, room.free)
    if not job.cpus or room.cpus is None or not cpu_aware:
        return -left
    stranded = stranded_gpus(job, room.cpus, room.gpus, room.largest, room.free, room.free_cpus)
    return packed(left, stranded)


def packed(left: float, stranded: float) -> float:
    """``binpack``'s score under its CPU rule."""
    return -STRANDED_FIRST * stranded - left


def cpu_ceiling(job: JobRequest, shapes: Callable[[], Shapes | None]) -> Callable[[int], float]:
    """Under the CPU rule, at most the score of any node at ``rank`` (its free capacity: idle
    GPUs, or free shareable bytes) or later in the walk (``declarations.Walked``).

    Nothing stranded is the best a node can do: ``-left``. For a share, stranded capacity
    grows with free GPU memory and shrinks with free CPUs, so a tighter bound is
    ``stranded_gpus`` of a node no node can beat: the largest GPUs of the walked nodes,
    the most CPUs free on any of them at the start of the cycle (free CPUs only shrink)
    and the lowest CPUs-per-GPU ratio any has for the job. Where every node has the same
    CPUs, GPUs and GPU size the bound is the very computation of a node with the most
    CPUs free, so it is exact for such a node (a walk past many alike nodes stops at the
    second); otherwise it is lowered by a rounding margin.
    """
    share = job.gpu_memory
    found = shapes() if share is not None and job.gpus > 0 and job.cpus else None
    if share is None or found is None or not found[0]:
        return lambda rank: -left_after(job, rank, rank)
    sizes, most_free = found
    taken = job.gpus * share
    cpus = job.cpus or 0.0
    ratio = min(min(c / g, cpus * size / taken) for c, g, size in sizes)
    largest = max(size for _, _, size in sizes)
    if ratio <= 0:
        return lambda rank: -left_after(job, rank, rank)
    exact = len(sizes) == 1

    def ceiling(rank: int) -> float:
        stranded = stranded_gpus(job, ratio, 1, largest, rank, most_free)
        if not exact:
            stranded = max(0.0, stranded - 1e-9 * (1.0 + stranded))
        return packed(left_after(job, 0, rank), stranded)

    return ceiling


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
