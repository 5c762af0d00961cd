"""How ``binpack`` places one-GPU shares: where they lose least at the job mix's share prices.

Best fit puts a share on the GPU with the least free memory that holds it.
On a cluster of mixed share sizes that is often the wrong GPU: a 0.32 share
put behind a 0.47 one leaves 0.21 that almost no share fits, where on an
idle GPU it would leave 0.68 for a 0.65 share. ``SharePricing`` ranks the
placements of a one-GPU share by what they cost the *job mix* (the shares
the cluster serves):

* **prices** (``share_prices``): the cutting-stock LP of the mix's share
  sizes gives each size a dual price in GPUs; a GPU with ``f`` free is
  worth the most that shares fitting in ``f`` are priced at, and a
  placement *loses* what its GPU's worth falls (``loss``). Nodes are
  compared by the least loss any of their usable GPUs offers;
* **stranded capacity** (for a share asking for CPUs, on a node that counts
  them): the free GPU capacity that the mix's common shapes (at least
  ``COMMON`` of its GPU jobs) could use by the node's GPUs but not with the
  CPUs it would have left (``fgd_adaptive.CpuLimitedFragmentation``). It
  comes first, as ``binpack``'s own CPU rule does for other jobs.

So a one-GPU share goes to the node that strands least, then loses least,
then has the least free shareable memory left (best fit), then the lowest
name; on it, to the GPU that loses least, then best fit (``choose``). The
score (``score``) is that order in one float; the capacity index
(``indexed.py``) walks nodes in the same order and reads the same functions.

**The job mix** (``job_mix``) is ``Snapshot.workload`` when the caller gives
it, else the snapshot's running and pending jobs: what the cluster serves
now and what waits. Prices depend only on the sizes' proportions, which are
rounded to ``STEPS_PER_OCTAVE`` steps per doubling (about 9%), so that a
mix that drifts by a job or two keeps its prices (the LP is solved once per
rounded mix: ``pricing_for`` memoizes it, and the result depends on the
snapshot alone). Multi-GPU shares, whole-GPU and CPU-only jobs are placed
as before (``Binpack``).

``Binpack(price_shares=True)`` (the default) turns it on. On the Alibaba 2023
trace (``benchmarks/alibaba_sharing.py``) it allocates 96.06% of GPU capacity
against 95.48% without it (policy ``unpriced``); at 1,000 nodes a cycle costs
what best fit's does (``scheduler/README.md``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from gpudock.scheduler import share_prices
from gpudock.scheduler.accel.index import GpuKey
from gpudock.scheduler.policies.fgd import TaskType
from gpudock.scheduler.policies.fgd_adaptive import CpuLimitedFragmentation
from gpudock.scheduler.snapshot import JobRequest, NodeView, RunningJob, Snapshot, WorkloadEntry

MILLI = 1000
COMMON = 0.01
"""GPU job shapes of at least this share of the mix are the ones stranded capacity is judged by."""
STEPS_PER_OCTAVE = 4
"""Each share size's part of the mix is rounded to ``2 ** (k / STEPS_PER_OCTAVE)``."""
STRANDED_FIRST = 1e12
"""Score per GPU stranded: 0.001 of a GPU outweighs any loss."""
LOSS_STEP = 1e-4
"""Losses are counted in steps of this many GPUs (a canonical value: equal losses compare equal)."""
DRIFT = 0.1
"""``MixTracker`` republishes the mix once its proportions have moved this far (total
variation distance)."""
GROWTH = 2.0
"""... or once the number of jobs has grown or shrunk this many times."""
RECOUNT = 8
"""``MixTracker.apply`` counts the running jobs over this many cycles (an eighth each), then
republishes if the mix has drifted."""
LOSS_FIRST = 1e4
"""Score per loss step: one step outweighs 10,000 GiB of capacity left."""

MEMO_LIMIT = 100_000
"""Entries a memo keeps before it starts over (a long-lived scheduler meets many states)."""

Pair = GpuKey
"""``(memory_total, free bytes)`` of a GPU that shares may use (healthy, not held exclusively)."""
Summary = tuple[tuple[int, ...], float]


def thousandths(size: int, free: int) -> int:
    """A GPU's free capacity in thousandths: ``MILLI`` when wholly free, else at most 999."""
    if free >= size:
        return MILLI
    return max(0, min(MILLI - 1, free * MILLI // max(size, 1)))


class SharePricing:
    """The prices of one job mix, as ``binpack`` reads them (module doc).

    ``value``: the worth of each free amount 0..``MILLI`` (``share_prices.values``);
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


def priced(job: JobRequest) -> bool:
    """True for the jobs ``SharePricing`` places: shares of one GPU on one node."""
    return job.gpus == 1 and job.gpu_memory is not None and job.nodes == 1


def job_mix(snapshot: Snapshot) -> list[WorkloadEntry]:
    """``Snapshot.workload``, or the running and pending jobs as ``(gpus, gpu_memory, cpus,
    count)``."""
    if snapshot.workload is not None:
        return list(snapshot.workload)
    counts = running_shapes(snapshot.running)
    counts.update(pending_shapes(snapshot.pending))
    return [(gpus, memory, cpus, n) for (gpus, memory, cpus), n in counts.items()]


Shape = tuple[int, int | None, float | None]
"""A job's ``(gpus, gpu_memory per GPU or None, cpus)``: what the mix counts."""


def running_shapes(running: Sequence[RunningJob]) -> Counter[Shape]:
    """How many of ``running`` have each shape."""
    return Counter([(len(r.gpu_uuids), r.memory_per_gpu, r.cpus) for r in running])


def pending_shapes(pending: Sequence[JobRequest]) -> Counter[Shape]:
    """How many of ``pending`` have each shape."""
    return Counter([(j.gpus, j.gpu_memory if j.gpus else None, j.cpus) for j in pending])


class MixTracker:
    """The job mix a caller passes as ``Snapshot.workload``, kept while it has not drifted.

    A cycle whose rounded mix is new solves one LP (milliseconds for a few share sizes,
    tens of milliseconds for tens). Callers that run cycle after cycle (the server's
    controller, the simulator, the benchmarks) keep one tracker and give every snapshot
    ``tracker.workload(job_mix(snapshot))``: the mix last published, replaced when the
    shapes' proportions have moved by at least ``drift`` (total variation distance) or
    the number of jobs has grown or shrunk by ``growth`` times since. Deterministic in the
    sequence of mixes it is given.
    """

    def __init__(
        self, drift: float = DRIFT, growth: float = GROWTH, recount: int = RECOUNT
    ) -> None:
        self.drift = drift
        self.growth = growth
        self.recount = recount
        self._since = 0  # ``apply`` calls in this round (``apply``)
        self._round: Counter[Shape] = Counter()  # the shapes counted so far this round
        self.published: tuple[WorkloadEntry, ...] | None = None
        self._parts: dict[tuple[int, int | None, float | None], float] = {}
        self._jobs = 0
        self.publications = 0

    def apply(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with ``workload`` set to the tracked mix; ``snapshot`` itself when no
        pending job is a one-GPU share (nothing to price: the mix is not even counted) or it
        carries a workload already.

        The first call counts the running and pending jobs (``job_mix``). After it the count
        is spread over ``recount`` calls, so that no cycle pays for all the running jobs:
        the ``k``-th call of a round counts every ``recount``-th running job from the
        ``k``-th, the last also the pending jobs, and then the round's counts are the mix
        (``workload``). O(running jobs / ``recount`` + pending jobs) per call.
        """
        if snapshot.workload is not None or not any(priced(j) for j in snapshot.pending):
            return snapshot
        published = self.published
        if published is None:
            return replace(snapshot, workload=self.workload(job_mix(snapshot)))
        self._round.update(running_shapes(snapshot.running[self._since :: self.recount]))
        self._since += 1
        if self._since >= self.recount:
            self._round.update(pending_shapes(snapshot.pending))
            counted = [(gpus, memory, cpus, n) for (gpus, memory, cpus), n in self._round.items()]
            self._since, self._round = 0, Counter()
            published = self.workload(counted)
        return replace(snapshot, workload=published)

    def workload(self, mix: Sequence[WorkloadEntry]) -> tuple[WorkloadEntry, ...]:
        """The mix to pass for a cycle whose current mix is ``mix``."""
        jobs = sum(n for *_, n in mix)
        parts: dict[tuple[int, int | None, float | None], float] = {}
        for gpus, memory, cpus, n in mix:
            parts[(gpus, memory, cpus)] = parts.get((gpus, memory, cpus), 0.0) + n / max(jobs, 1)
        if self.published is not None and jobs > 0 and self._jobs > 0:
            ratio = jobs / self._jobs
            shapes = sorted(parts.keys() | self._parts.keys(), key=str)  # a fixed order: a sum
            moved = sum(abs(parts.get(k, 0.0) - self._parts.get(k, 0.0)) for k in shapes) / 2
            if moved < self.drift and 1 / self.growth < ratio < self.growth:
                return self.published
        self.published = tuple(mix)
        self._parts, self._jobs = parts, jobs
        self.publications += 1
        return self.published


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
            sizes[share_prices.priced_size(share)] += count
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
    return share_prices.values(share_prices.prices(dict(demand)))


@lru_cache(maxsize=64)
def _measure(common: tuple[tuple[int, int, float], ...]) -> CpuLimitedFragmentation | None:
    if not common:
        return None
    tasks = [
        (TaskType(float(gpus) if gpus else share / MILLI, cpus), 1.0)
        for gpus, share, cpus in common
    ]
    return CpuLimitedFragmentation(tasks)
