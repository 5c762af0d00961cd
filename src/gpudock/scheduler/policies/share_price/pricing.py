"""``SharePricing``: where a one-GPU share loses least at the job mix's share prices.

Best fit puts a share on the GPU with the least free memory that holds it.
On a cluster of mixed share sizes that is often the wrong GPU: a 0.32 share
put behind a 0.47 one leaves 0.21 that almost no share fits, where on an
idle GPU it would leave 0.68 for a 0.65 share. ``SharePricing`` ranks the
placements of a one-GPU share by what they cost the *job mix* (the shares
the cluster serves):

* **prices** (``lp.py``): the cutting-stock LP of the mix's share sizes
  gives each size a dual price in GPUs; a GPU with ``f`` free is worth the
  most that shares fitting in ``f`` are priced at, and a placement *loses*
  what its GPU's worth falls (``loss``). Nodes are compared by the least
  loss any of their usable GPUs offers;
* **stranded capacity** (for a share asking for CPUs, on a node that counts
  them): the free GPU capacity that the mix's common shapes (at least
  ``COMMON`` of its GPU jobs) could use by the node's GPUs but not with the
  CPUs it would have left (``workload.CpuLimitedFragmentation``). It comes
  first, as ``binpack``'s own CPU rule does for other jobs.

So a one-GPU share goes to the node that strands least, then loses least,
then has the least free shareable memory left (best fit), then the lowest
name (``score``); on it, to the GPU that loses least, then best fit
(``pick``). The capacity index (``scheduler/accel/``) walks nodes in the
same order and reads ``judge``.

**The job mix** (``mix.job_mix``) is ``Snapshot.workload`` when the caller
gives it, else the snapshot's running and pending jobs. Prices depend only
on the sizes' proportions, rounded to ``STEPS_PER_OCTAVE`` steps per
doubling (about 9%), so that a mix that drifts by a job or two keeps its
prices: ``pricing_for`` solves the LP once per rounded mix (memoized; the
result depends on the snapshot alone).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from gpudock.scheduler.capacity import NodeState, usable_now
from gpudock.scheduler.policies.share_price import lp
from gpudock.scheduler.policies.share_price.mix import job_mix
from gpudock.scheduler.snapshot import JobRequest, NodeView, Snapshot
from gpudock.scheduler.workload import CpuLimitedFragmentation, TaskType

MILLI = 1000
COMMON = 0.01
"""GPU job shapes of at least this share of the mix are the ones stranded capacity is judged by."""
STEPS_PER_OCTAVE = 4
"""Each share size's part of the mix is rounded to ``2 ** (k / STEPS_PER_OCTAVE)``."""
STRANDED_FIRST = 1e12
"""Score per GPU stranded: 0.001 of a GPU outweighs any loss."""
LOSS_STEP = 1e-4
"""Losses are counted in steps of this many GPUs (a canonical value: equal losses compare equal)."""
LOSS_FIRST = 1e4
"""Score per loss step: one step outweighs 10,000 GiB of capacity left."""

MEMO_LIMIT = 100_000
"""Entries a memo keeps before it starts over (a long-lived scheduler meets many states)."""

Pair = tuple[int, ...]
"""``(memory_total, free bytes)`` of a GPU that shares may use (healthy, not held exclusively).
Typed as a tuple of any length, as the capacity index's keys are, so that compiled code
passes them as they are."""
Summary = tuple[tuple[int, ...], float]


def thousandths(size: int, free: int) -> int:
    """A GPU's free capacity in thousandths: ``MILLI`` when wholly free, else at most 999."""
    if free >= size:
        return MILLI
    return max(0, min(MILLI - 1, free * MILLI // max(size, 1)))


class SharePricing:
    """The prices of one job mix, as ``binpack`` reads them (module doc).

    ``value``: the worth of each free amount 0..``MILLI`` (``lp.values``);
    ``measure``: stranded capacity by the mix's common shapes, or None when the mix has
    no GPU job (then nothing is stranded).
    """

    __slots__ = ("_losses", "_stranded", "measure", "value")

    def __init__(self, value: Sequence[float], measure: CpuLimitedFragmentation | None) -> None:
        self.value = value
        self.measure = measure
        self._stranded: dict[Summary, float] = {}
        self._losses: dict[tuple[int, int, int], int] = {}

    def loss(self, size: int, free: int, share: int) -> int:
        """What a share of ``share`` bytes on a GPU of ``size`` with ``free`` costs, in
        ``LOSS_STEP``s: its worth before less its worth after (the share's own price, the
        same wherever it goes, is left out). Memoized."""
        key = (size, free, share)
        found = self._losses.get(key)
        if found is None:
            if len(self._losses) >= MEMO_LIMIT:
                self._losses.clear()
            value = self.value
            worth = value[thousandths(size, free)] - value[thousandths(size, free - share)]
            found = self._losses[key] = round(worth / LOSS_STEP)
        return found

    def choose(self, pairs: Sequence[Pair], share: int) -> tuple[int, int] | None:
        """``(loss, position)`` of the GPU of ``pairs`` (in GPU order) a share goes to: the
        least loss, then a GPU already shared, then the least free, then the first; None
        when none holds it."""
        best: tuple[int, bool, int, int] | None = None
        for i, (size, free) in enumerate(pairs):
            if free < share or size < share:
                continue
            key = (self.loss(size, free, share), free >= size, free, i)
            if best is None or key < best:
                best = key
        return None if best is None else (best[0], best[3])

    def stranded(self, pairs: Iterable[Pair], free_cpus: float) -> float:
        """GPUs the mix's common shapes could use on a node with these GPUs but not with
        ``free_cpus`` free (``CpuLimitedFragmentation.parts``); memoized."""
        if self.measure is None:
            return 0.0
        free = [t for t in (thousandths(size, f) for size, f in pairs) if t > 0]
        free.sort()
        summary = (tuple(free), round(free_cpus, 3))
        found = self._stranded.get(summary)
        if found is None:
            if len(self._stranded) >= MEMO_LIMIT:
                self._stranded.clear()
            found = self._stranded[summary] = self.measure.parts(summary)[1]
        return found

    def judge(
        self, job: JobRequest, pairs: Sequence[Pair], node_pairs: Sequence[Pair],
        free_all: int, free_cpus: float | None,
    ) -> tuple[float, float] | None:  # fmt: skip
        """``(score, stranded)`` of a node for a one-GPU share ``job``; None when no GPU holds it.

        ``pairs``: the GPUs the job may use (its model's), in GPU order; ``node_pairs``: all
        the node's shareable GPUs, ``pairs``' first (the summary is a multiset, so only which
        pair changes matters); ``free_all``: the node's free shareable bytes; ``free_cpus``:
        None when the node does not count CPUs.
        """
        share = job.gpu_memory
        assert share is not None
        chosen = self.choose(pairs, share)
        if chosen is None:
            return None
        loss, at = chosen
        stranded = 0.0
        if free_cpus is not None and job.cpus:
            size, free = pairs[at]
            after = list(node_pairs)
            after.remove((size, free))
            after.append((size, free - share))
            stranded = self.stranded(after, free_cpus - job.cpus)
        left = (free_all - share) / 2**30
        return -STRANDED_FIRST * stranded - LOSS_FIRST * loss - left, stranded

    def score(self, job: JobRequest, node: NodeState) -> float:
        """``binpack``'s score of ``node`` for a one-GPU share ``job`` (``priced``): ``judge``'s,
        or ``-inf`` when no GPU of the node holds it."""
        judged = self.judge(
            job,
            [(g.memory_total, g.memory_total - g.used_memory) for g in node.gpus
             if usable_now(job, g)],
            node_pairs(node),
            node.free_memory,
            node.free_cpus if node.cpus is not None else None,
        )  # fmt: skip
        return -math.inf if judged is None else judged[0]

    def pick(self, job: JobRequest, node: NodeState) -> list[int] | None:
        """The GPU of ``node`` a one-GPU share ``job`` takes (``choose``), as the GPU picker
        returns it; None when none holds it."""
        share = job.gpu_memory
        assert share is not None
        holders = [g for g in node.gpus if usable_now(job, g)]
        found = self.choose(
            [(g.memory_total, g.memory_total - g.used_memory) for g in holders], share
        )
        return None if found is None else [holders[found[1]].index]


def node_pairs(node: NodeState) -> list[Pair]:
    """``(memory_total, free bytes)`` of each GPU of ``node`` shares may use, in GPU order."""
    return [
        (g.memory_total, g.memory_total - g.used_memory)
        for g in node.gpus
        if g.healthy and not g.exclusive
    ]


def pricing_for(snapshot: Snapshot, memo: LargestMemo | None = None) -> SharePricing | None:
    """The ``SharePricing`` of the snapshot's job mix; None when it has no share.

    Shares are fractions of the largest GPU memory on the snapshot's nodes (``memo``: see
    ``largest_memory``). Memoized on the rounded mix, so a mix seen before costs no LP.
    """
    reference = largest_memory(snapshot.nodes, memo)
    if reference <= 0:
        return None
    shapes: Counter[tuple[int, int, float]] = Counter()  # (whole GPUs, share thousandths, cpus)
    for gpus, memory, cpus, count in job_mix(snapshot):
        if gpus <= 0 or count <= 0:
            continue  # CPU-only jobs are no GPU shape
        if memory is None:
            shapes[(gpus, 0, cpus or 0.0)] += count
        else:
            share = min(MILLI - 1, max(1, round(memory * MILLI / reference)))
            shapes[(0, share, cpus or 0.0)] += count
    total = sum(shapes.values())
    sizes: Counter[int] = Counter()
    for (_, share, _), count in shapes.items():
        if share:
            sizes[lp.priced_size(share)] += count
    if not sizes:
        return None
    in_shares = sum(sizes.values())
    demand = tuple(
        sorted(
            (size, round(STEPS_PER_OCTAVE * math.log2(count / in_shares)))
            for size, count in sizes.items()
        )
    )
    common = tuple(sorted(shape for shape, count in shapes.items() if count >= COMMON * total))
    return _pricing(demand, common)


@dataclass(slots=True)
class LargestMemo:
    """The last ``largest_memory`` answer of a caller's cycles (``SchedulerSession``): the
    node tuple asked about and its answer, replaced whole."""

    last: tuple[tuple[NodeView, ...], int] | None = None


def largest_memory(nodes: tuple[NodeView, ...], memo: LargestMemo | None = None) -> int:
    """The largest GPU memory on ``nodes`` (0 when none has GPUs); with a ``memo``, the
    last answer is kept for the same tuple (a caller's cycles often share one)."""
    last = memo.last if memo is not None else None
    if last is not None and last[0] is nodes:
        return last[1]
    largest = max([g.memory_total for v in nodes for g in v.gpus], default=0)
    if memo is not None:
        memo.last = (nodes, largest)
    return largest


@lru_cache(maxsize=256)
def _pricing(
    demand: tuple[tuple[int, int], ...], common: tuple[tuple[int, int, float], ...]
) -> SharePricing:
    """The ``SharePricing`` of a rounded mix: ``demand`` as ``(size, step)``, each size's part
    being ``2 ** (step / STEPS_PER_OCTAVE)``; ``common``: the common shapes."""
    weights = {size: 2.0 ** (step / STEPS_PER_OCTAVE) for size, step in demand}
    return SharePricing(_values(tuple(sorted(weights.items()))), _measure(common))


@lru_cache(maxsize=256)
def _values(demand: tuple[tuple[int, float], ...]) -> Sequence[float]:
    return lp.values(lp.prices(dict(demand)))


@lru_cache(maxsize=64)
def _measure(common: tuple[tuple[int, int, float], ...]) -> CpuLimitedFragmentation | None:
    if not common:
        return None
    tasks = [
        (TaskType(float(gpus) if gpus else share / MILLI, cpus), 1.0)
        for gpus, share, cpus in common
    ]
    return CpuLimitedFragmentation(tasks)
