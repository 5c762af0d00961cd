"""The workload model shared by fragmentation-aware policies: task types and ``F_n``.

A *workload* is a distribution of task types ``t`` (``TaskType``: a share of
one GPU or whole GPUs, and CPUs) with popularity ``p_t``. A node's
*fragmentation* (FGD, Weng et al., ATC'23) is::

    F_n = sum_t p_t * F_n(t)

where ``F_n(t)`` is the free GPU capacity on ``n`` that ``t`` cannot use
(``Fragmentation``). ``CpuLimitedFragmentation`` also counts what a node's
free CPUs keep a type from using, and splits out the capacity that the
*common* types could use by the GPUs alone but not with the CPUs left
(``parts``: ``stranded``).

Read by the experimental ``fgd`` and ``fgd_adaptive`` policies and by the
default share-price plugin (``policies/share_price/``), which is why it
lives in neither: a default policy imports no experimental one. Pure data
and arithmetic over ``NodeSummary`` tuples; no scheduler state.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

MILLI = 1000
"""Free capacity is counted in thousandths of a GPU."""
CPU_EPSILON = 1e-9  # as the cpu_capacity filter
MEMO_LIMIT = 200_000
"""Node states remembered per workload (a few tens of MB at most)."""
COMMON = 0.01
"""Task types of at least this popularity are the common ones ``stranded`` is judged by."""
STRANDED_WEIGHT = 1000.0
"""How many times GPUs stranded by CPUs count in ``F_n``: in effect before anything else."""


@dataclass(frozen=True, slots=True)
class TaskType:
    """One kind of task of the target workload.

    ``gpus``: a share ``d < 1`` of one GPU, or ``k >= 1`` whole GPUs.
    ``cpus``: cores it asks for (on nodes that count CPUs). CPU-only tasks
    are not task types: every free GPU is a fragment to them wherever a job
    goes, which shifts every node's score equally.
    """

    gpus: float
    cpus: float = 0.0

    def __post_init__(self) -> None:
        if not self.gpus > 0:
            raise ValueError(
                f"a task type needs GPUs (CPU-only tasks are left out), got {self.gpus}"
            )
        if self.gpus >= 1 and self.gpus != int(self.gpus):
            raise ValueError(f"whole-GPU task types need a whole number of GPUs, got {self.gpus}")
        if self.gpus < 1 and round(self.gpus * MILLI) < 1:
            raise ValueError(f"a GPU share must be at least 1/{MILLI}, got {self.gpus}")
        if self.cpus < 0:
            raise ValueError(f"cpus must not be negative, got {self.cpus}")


Workload = Sequence[tuple[TaskType, float]]
"""Task types with their popularity (any positive weights; normalised to sum to 1)."""

DEFAULT_WORKLOAD: tuple[tuple[TaskType, float], ...] = tuple(
    (TaskType(g), 1.0) for g in (0.25, 0.5, 1, 2, 4, 8)
)
"""A uniform mix over 0.25, 0.5, 1, 2, 4 and 8 GPUs, no CPUs: the registered policies' workload."""

NodeSummary = tuple[tuple[int, ...], float | None]
"""``(free thousandths of each GPU with some free, ascending; free CPUs or None)``.

An idle GPU counts ``MILLI``, a partly used one at most ``MILLI - 1``; CPUs
are None on nodes that do not count them.
"""


class Fragmentation:
    """``F_n`` for one workload, in GPUs, memoised on ``NodeSummary``."""

    def __init__(self, workload: Workload) -> None:
        total = sum(p for _, p in workload)
        if not workload or total <= 0 or any(p < 0 for _, p in workload):
            raise ValueError("a workload needs task types with non-negative popularity, not all 0")
        # (whole GPUs k, or 0 for a share; share in thousandths; cpus; popularity)
        self._tasks = tuple(
            (int(t.gpus), 0, t.cpus, p / total)
            if t.gpus >= 1
            else (0, round(t.gpus * MILLI), t.cpus, p / total)
            for t, p in workload
            if p > 0
        )
        self._memo: dict[NodeSummary, float] = {}

    def of(self, summary: NodeSummary) -> float:
        """``F_n`` of a node in this state: free GPUs the workload cannot use, weighted."""
        value = self._memo.get(summary)
        if value is None:
            if len(self._memo) >= MEMO_LIMIT:
                self._memo.clear()  # a long-lived scheduler: start over rather than grow
            value = self._memo[summary] = self._compute(summary)
        return value

    def _compute(self, summary: NodeSummary) -> float:
        free, cpus = summary
        total, below, idle, partial = free_profile(free)
        if total == 0:
            return 0.0
        frag = 0.0
        for whole, share, task_cpus, p in self._tasks:
            if cpus is not None and task_cpus > cpus + CPU_EPSILON:
                frag += p * total
            elif whole:
                frag += p * (partial if idle >= whole else total)
            else:
                first = bisect_left(free, share)  # GPUs before it have less than the share free
                frag += p * (below[first] if first < len(free) else total)
        return frag / MILLI


def free_profile(free: tuple[int, ...]) -> tuple[int, list[int], int, int]:
    """``(total, below, idle, partial)`` of a ``NodeSummary``'s free capacities.

    ``below[i]``: the free capacity of the ``i`` least free GPUs; ``idle``:
    idle GPUs; ``partial``: the free capacity of the partly used ones.
    """
    total = sum(free)
    idle = len(free) - bisect_left(free, MILLI)
    return total, [0, *accumulate(free)], idle, total - MILLI * idle


class CpuLimitedFragmentation(Fragmentation):
    """``F_n`` where CPUs limit the copies of each task type a node can hold (module doc).

    ``F_n`` here is ``fragments + STRANDED_WEIGHT x stranded`` of ``parts``.
    """

    def __init__(self, workload: Workload) -> None:
        super().__init__(workload)
        common = tuple(i for i, task in enumerate(self._tasks) if task[3] >= COMMON)
        self._common = common or tuple(range(len(self._tasks)))

    def _compute(self, summary: NodeSummary) -> float:
        fragments, stranded = self.parts(summary)
        return fragments + STRANDED_WEIGHT * stranded

    def parts(self, summary: NodeSummary) -> tuple[float, float]:
        """``(fragments, stranded)`` of a node in this state, in GPUs.

        ``fragments``: ``sum_t p_t F_n(t)`` with CPU-limited ``F_n(t)``.
        ``stranded``: the free GPU capacity the common task types could use
        by its GPUs alone but not with the node's free CPUs: the least
        ``F_n(t)`` over common types minus the least with CPUs ignored
        (FGD's ``F_n(t)``); 0 on nodes that do not count CPUs.
        """
        free, cpus = summary
        total, below, idle, partial = free_profile(free)
        if total == 0:
            return 0.0, 0.0
        frag = 0.0
        limited: list[int] = []  # F_n(t), CPUs counted
        unlimited: list[int] = []  # F_n(t), CPUs ignored (FGD's)
        for whole, share, task_cpus, p in self._tasks:
            copies = cpu_copies(cpus, task_cpus)
            if whole:
                by_gpus = partial if idle >= whole else total
                if copies is None:
                    value = by_gpus
                else:
                    value = total - MILLI * whole * min(idle // whole, copies)
            else:
                first = bisect_left(free, share)  # GPUs before it have less than the share free
                by_gpus = below[first] if first < len(free) else total
                value = by_gpus
                if first < len(free) and copies is not None:
                    slots = sum(f // share for f in free[first:])
                    if copies < slots:
                        value = total - share * copies
            if copies == 0:
                value = total
            frag += p * value
            limited.append(value)
            unlimited.append(by_gpus)
        stranded = min(limited[i] for i in self._common) - min(unlimited[i] for i in self._common)
        return frag / MILLI, stranded / MILLI


def cpu_copies(cpus: float | None, task_cpus: float) -> int | None:
    """Copies of a task asking ``task_cpus`` that ``cpus`` free CPUs allow; None: no limit."""
    if cpus is None or task_cpus <= 0:
        return None
    return math.floor((cpus + CPU_EPSILON) / task_cpus)
