"""Score policy and GPU picker: fragmentation gradient descent (FGD; Weng et al., ATC'23).

Given a target workload, a distribution of task types ``t`` with popularity
``p_t``, a node's *fragmentation* is::

    F_n = sum_t p_t * F_n(t)

where ``F_n(t)`` is the free GPU capacity on ``n`` that ``t`` cannot use:

* all of the node's free GPU capacity when ``t`` cannot fit on ``n`` at all
  (too few free CPUs on a node that counts CPUs, no GPU with ``d`` free for a
  share ``d``, fewer than ``k`` idle GPUs for ``k`` whole GPUs);
* else the free capacity of the GPUs that cannot serve ``t``: GPUs with less
  than ``d`` free for a share ``d``; partially used GPUs for whole GPUs.

Free capacity is measured in GPUs: ``free_memory / memory_total`` per GPU,
floored to 1/1000 (an idle GPU is exactly 1); unhealthy GPUs and GPUs held
exclusively have none. The score of a node for a job is
``-(F_n after placing it - F_n before)`` for the GPU choice that raises
``F_n`` least, and ``FgdPicker`` picks that same choice (``best_choice``):

* whole-GPU jobs: every idle GPU is alike to ``F_n``, so the GPUs are the
  best-fit picker's (topology-aware, ``topology.choose``);
* shared jobs on one GPU: every usable GPU is tried, ties to best-fit order
  (already shared first, least free, smallest, lowest index);
* shared jobs on several GPUs (a heuristic): GPUs are taken greedily, each
  the one that raises ``F_n`` least given those taken before; with a
  ``topology`` requirement, the best-fit picker's set;
* CPU-only jobs: no GPUs; their CPUs still count (they may leave too few
  CPUs for the workload's GPU tasks).

Nodes whose rise is equal (to a millionth of a GPU) go to the one left with
the least free GPU capacity (best fit), not to the lowest name, so that
ties are deterministic and pack; FGD's own simulator breaks such ties at
random.

The workload is a constructor argument. The registry's factories take none,
so the registered ``fgd`` and ``fgd_picker`` use ``DEFAULT_WORKLOAD``, a
uniform mix over 0.25, 0.5, 1, 2, 4 and 8 GPUs asking for no CPUs; a
caller that knows its workload from history (as FGD's paper does) builds
``Fgd(workload)`` and ``FgdPicker(workload)`` itself.

Pure, as the framework requires: a function of the job's ``placement_key``
and one node's state, never mutating it. ``F_n`` is memoised per workload on
``NodeSummary`` (free capacity per GPU and free CPUs), which many nodes share.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from functools import lru_cache
from typing import NamedTuple

from gpudock.scheduler.capacity import CycleState, GpuState, usable_now
from gpudock.scheduler.framework import NodeState
from gpudock.scheduler.policies.gpu_picker import best_fit
from gpudock.scheduler.snapshot import JobRequest
from gpudock.scheduler.workload import (
    DEFAULT_WORKLOAD,
    MEMO_LIMIT,
    MILLI,
    Fragmentation,
    NodeSummary,
    TaskType,
    Workload,
)

RISE_STEP = 1e-6
"""``Fgd`` compares rises of ``F_n`` to a millionth of a GPU, then breaks ties..."""
TIE_BREAK = 1e-9
"""...by the free GPU capacity left (``TIE_BREAK`` per GPU: decisive only between
equal rounded rises, for nodes of under 1,000 GPUs)."""


def gpu_free(gpu: GpuState) -> int:
    """The GPU's free capacity in thousandths: ``MILLI`` when idle, 0 when unusable."""
    if not gpu.healthy or gpu.exclusive:
        return 0
    if gpu.used_memory == 0 and gpu.shared_jobs == 0:
        return MILLI
    free = (gpu.memory_total - gpu.used_memory) * MILLI // max(gpu.memory_total, 1)
    return max(0, min(MILLI - 1, free))


def summarize(node: NodeState) -> NodeSummary:
    """The node's ``NodeSummary`` (what ``Fragmentation.of`` reads)."""
    free = []
    for g in node.gpus:  # gpu_free, inlined: this runs for every node a job is scored on
        if not g.healthy or g.exclusive:
            continue
        if g.used_memory == 0 and g.shared_jobs == 0:
            free.append(MILLI)
        else:
            m = (g.memory_total - g.used_memory) * MILLI // max(g.memory_total, 1)
            if m > 0:
                free.append(min(MILLI - 1, m))
    free.sort()
    cpus = None if node.cpus is None else round(node.free_cpus, 3)
    return tuple(free), cpus


@lru_cache(maxsize=16)
def fragmentation(workload: tuple[tuple[TaskType, float], ...]) -> Fragmentation:
    """The shared ``Fragmentation`` of a workload (a scorer and a picker share one memo)."""
    return Fragmentation(workload)


def _measure(workload: Workload | Fragmentation | None) -> Fragmentation:
    """The ``Fragmentation`` given, or the shared one of ``workload`` (default when None)."""
    if isinstance(workload, Fragmentation):
        return workload
    return fragmentation(tuple(workload or DEFAULT_WORKLOAD))


def _replaced(free: tuple[int, ...], old: int, new: int) -> tuple[int, ...]:
    """``free`` with one GPU's ``old`` free capacity replaced by ``new`` (0: dropped)."""
    out = list(free)
    if old > 0:
        out.remove(old)
    if new > 0:
        out.append(new)
        out.sort()
    return tuple(out)


def _after_share(gpu: GpuState, share: int) -> int:
    """The GPU's free thousandths once a share of ``share`` bytes is taken."""
    free = (gpu.memory_total - gpu.used_memory - share) * MILLI // max(gpu.memory_total, 1)
    return max(0, min(MILLI - 1, free))


def _best_fit_order(gpu: GpuState) -> tuple[bool, int, int, int]:
    """Already-shared GPUs first, then the least free memory, the smallest GPU, the index.

    GPUs equal up to the index are interchangeable to ``F_n``, so the choice's
    rise and capacity left depend only on the multiset of the other fields.
    """
    return (gpu.idle, gpu.free_memory, gpu.memory_total, gpu.index)


class Choice(NamedTuple):
    """Where FGD puts a job on one node."""

    rise: float  # of F_n, in GPUs (negative: fragmentation falls)
    gpus: list[int]  # GPU indices
    left: float  # free GPU capacity left on the node, in GPUs


def best_choice(
    frag: Fragmentation, job: JobRequest, node: NodeState, *, pick: bool = True
) -> Choice | None:
    """The ``Choice`` FGD makes on ``node``, or None if the job cannot fit.

    See the module doc for how the GPUs are chosen. With ``pick=False`` the
    indices of whole-GPU jobs are left out (the rise does not depend on which
    idle GPUs they take). Never mutates ``node``.
    """
    free, cpus = summarize(node)
    before = frag.of((free, cpus))
    if cpus is not None and job.cpus:
        cpus = round(cpus - job.cpus, 3)
    if job.gpus == 0:
        return _choice(frag, free, cpus, before, [])
    if not job.shared:
        if node.idle_gpus < job.gpus:
            return None
        whole = best_fit(job, node) if pick else []
        if whole is None:
            return None
        idle = len(free) - bisect_left(free, MILLI)
        after = free[: len(free) - min(job.gpus, idle)]  # whole GPUs take idle ones (MILLI)
        return _choice(frag, after, cpus, before, whole)
    share = job.gpu_memory
    assert share is not None
    usable = [g for g in node.gpus if usable_now(job, g)]
    if len(usable) < job.gpus:
        return None
    if job.topology is not None and job.gpus >= 2:
        picked = best_fit(job, node)
        if picked is None:
            return None
        for g in node.gpus:
            if g.index in picked:
                free = _replaced(free, gpu_free(g), _after_share(g, share))
        return _choice(frag, free, cpus, before, picked)
    return _greedy_shares(frag, usable, share, job.gpus, free, cpus, before)


def _greedy_shares(
    frag: Fragmentation,
    usable: list[GpuState],
    share: int,
    count: int,
    free: tuple[int, ...],
    cpus: float | None,
    before: float,
) -> Choice:
    """Take ``count`` shares one GPU at a time, each where ``F_n`` rises least.

    Ties go to best-fit order (``_best_fit_order``).
    """
    if len(usable) > 1:
        usable = sorted(usable, key=_best_fit_order)
    picked: list[int] = []
    for _ in range(count):
        best = (math.inf, 0, free)
        tried: set[tuple[int, int]] = set()
        for i, g in enumerate(usable):
            move = (gpu_free(g), _after_share(g, share))
            if move in tried:  # an equal GPU further down best-fit order: same F_n
                continue
            tried.add(move)
            after = _replaced(free, *move)
            value = frag.of((after, cpus))
            if value < best[0] - 1e-12:
                best = (value, i, after)
        value, i, free = best
        picked.append(usable.pop(i).index)
    return _choice(frag, free, cpus, before, picked)


def _choice(
    frag: Fragmentation, free: tuple[int, ...], cpus: float | None, before: float, gpus: list[int]
) -> Choice:
    """The ``Choice`` that leaves the node with ``(free, cpus)``."""
    return Choice(frag.of((free, cpus)) - before, gpus, sum(free) / MILLI)


class Fgd:
    """Prefers the node whose fragmentation rises least (falls most) when it takes the job.

    ``workload``: task types and popularity; None means ``DEFAULT_WORKLOAD``
    (the registered ``fgd`` takes no arguments, so it uses that default); or
    a ``Fragmentation`` to score with (another measure of ``F_n``).
    """

    name = "fgd"

    def __init__(self, workload: Workload | Fragmentation | None = None) -> None:
        self.measure = _measure(workload)
        self._frag = self.measure
        self._memo: dict[tuple[object, ...], float] = {}

    def score(self, job: JobRequest, node: NodeState, state: CycleState) -> float:
        """``-rise`` of ``F_n``, rounded to ``RISE_STEP``; ties to the node left fullest.

        Memoised on what decides it: the job's request, the node's
        ``NodeSummary`` and, for shares, the free memory of its usable GPUs.
        """
        key = self._key(job, node)
        value = self._memo.get(key) if key is not None else None
        if value is None:
            choice = best_choice(self._frag, job, node, pick=False)
            if choice is None:
                return -math.inf
            value = -round(choice.rise / RISE_STEP) * RISE_STEP - TIE_BREAK * choice.left
            if key is not None:
                if len(self._memo) >= MEMO_LIMIT:
                    self._memo.clear()
                self._memo[key] = value
        return value

    @staticmethod
    def _key(job: JobRequest, node: NodeState) -> tuple[object, ...] | None:
        """What ``best_choice(pick=False)`` reads; None when topology matters too."""
        request = (job.gpus, job.gpu_memory, job.cpus)
        if not job.shared:
            return (request, summarize(node))
        if job.topology is not None and job.gpus >= 2:
            return None
        shares = sorted(
            (g.idle, g.free_memory, g.memory_total) for g in node.gpus if usable_now(job, g)
        )
        return (request, summarize(node), tuple(shares))


class FgdPicker:
    """Picks the GPUs ``Fgd`` scored the node with (``best_choice``); never reserves them.

    ``workload`` as for ``Fgd``; give both the same one (or ``Fgd.measure``).
    """

    name = "fgd_picker"

    def __init__(self, workload: Workload | Fragmentation | None = None) -> None:
        self._frag = _measure(workload)

    def pick(self, job: JobRequest, node: NodeState, state: CycleState) -> list[int] | None:
        choice = best_choice(self._frag, job, node)
        return None if choice is None else choice.gpus
