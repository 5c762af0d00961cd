"""Reading the capacity index's buckets: walks in score order, and the closest fits.

``walk`` and ``first_node`` give a model class's nodes that can take a job's
GPUs now, best first; ``closest_*`` the capacity nearest to a request, for
``gpu_capacity``'s wording in step 4. Shared by the verdicts of ``verdicts.py``
and ``cpu_verdicts.py``.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

from gpudock.scheduler.accel.catalog import (
    Group,
    ModelClassIndex,
    Part,
)
from gpudock.scheduler.accel.index import (
    NodeFit,
    WholeKey,
)
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.policies.gpu_capacity import Closest
from gpudock.scheduler.snapshot import JobRequest

T = TypeVar("T")


def merged(lists: Sequence[Sequence[T]]) -> Iterator[T]:
    """The items of sorted ``lists`` in order (ties: the earlier list first), as
    ``heapq.merge`` but from the lists' heads, without an iterator per list."""
    heap = [(items[0], i, 0) for i, items in enumerate(lists) if items]
    heapq.heapify(heap)
    while heap:
        item, i, at = heap[0]
        yield item
        at += 1
        items = lists[i]
        if at < len(items):
            heapq.heapreplace(heap, (items[at], i, at))
        else:
            heapq.heappop(heap)


def _whole_walk(
    buckets: dict[WholeKey, list[str]], ranked: list[tuple[int, WholeKey]], gpus: int
) -> Iterator[tuple[int, str]]:
    """The nodes of the whole-GPU ``buckets`` with ``gpus`` idle GPUs, by ``(rank, name)``:
    ``ranked`` lists the buckets by rank, so buckets of one rank are merged by name, one
    rank after another (a walk that stops early reads the first ranks only)."""
    group: list[list[str]] = []
    group_rank = 0
    for rank, key in ranked:
        if key[1] < gpus:
            continue
        if group and rank != group_rank:
            for name in group[0] if len(group) == 1 else merged(group):
                yield group_rank, name
            group = []
        group_rank = rank
        group.append(buckets[key])
    for name in group[0] if len(group) == 1 else merged(group):
        yield group_rank, name


Shapes = tuple[set[tuple[float, int, int]], float] | None
"""A part's members' ``(CPUs, GPUs, largest GPU memory)`` (those with GPUs) and the most
CPUs free on one at the start of the cycle; None when a member does not count CPUs."""


def node_shapes(state: CycleState, part: Part) -> Shapes:
    """``Shapes`` of ``part``'s available members: their snapshot views and the GPUs of their
    ``ANY_MODEL`` fits (``CpuVerdicts._judge`` reads those; reservations change neither)."""
    shapes: set[tuple[float, int, int]] = set()
    most_free = 0.0
    views = state.views
    for name in part.index.fits:
        view = views[name]
        if view.cpus is None:
            return None
        fit = state.fit(name)
        if fit.sizes:
            shapes.add((view.cpus, fit.total, fit.sizes[0]))
        most_free = max(most_free, view.cpus - view.used_cpus)
    return shapes, most_free


def walk(klass: ModelClassIndex, job: JobRequest) -> Iterator[tuple[int, str]]:
    """Every node of ``klass`` that can take ``job``'s GPUs now, by ``(rank, name)``, lazily
    merged (``CpuVerdicts._walk``); the first is ``first_node``'s."""
    gpus, share = job.gpus, job.gpu_memory
    parts: list[Iterator[tuple[int, str]]] = []
    for part in klass.parts:
        index = part.index
        if share is not None and gpus > 0:  # ``job.shared``
            levels = index.shared(gpus).read(index.fits).items()
            parts.append(merged([entries for level, entries in levels if level >= share]))
        else:
            parts.append(_whole_walk(index.whole(), index.ranked_whole(), gpus))
    return parts[0] if len(parts) == 1 else heapq.merge(*parts)


def first_node(klass: ModelClassIndex, job: JobRequest) -> tuple[int, str] | None:
    """``(rank, name)`` of the class's best node for ``job``'s GPUs, the first that
    ``CpuVerdicts._walk`` yields: the best of the parts' best nodes (parts caught up)."""
    gpus, share = job.gpus, job.gpu_memory
    best: tuple[int, str] | None = None
    for part in klass.parts:
        if share is not None and gpus > 0:  # ``job.shared``, inlined
            found = part.index.best_shared(gpus, share)
        else:
            found = part.index.best_whole(gpus)
        if found is not None and (best is None or found < best):
            best = found
    return best


def closest_whole(parts: Sequence[Part], gpus: int) -> Closest:
    """``gpu_capacity.closest`` for a blocked whole-GPU job, from the whole-GPU buckets."""
    return closest_whole_of([item for part in parts for item in part.index.whole().items()], gpus)


def whole_buckets(fits: Iterable[tuple[str, NodeFit]]) -> list[tuple[WholeKey, list[str]]]:
    """Some nodes' whole-GPU buckets (``ClassIndex.whole``): key -> names, ascending."""
    buckets: dict[WholeKey, list[str]] = {}
    for name, fit in fits:
        buckets.setdefault(fit.whole_key, []).append(name)
    for names in buckets.values():
        names.sort()
    return list(buckets.items())


def closest_whole_of(buckets: Sequence[tuple[WholeKey, list[str]]], gpus: int) -> Closest:
    """``gpu_capacity.closest`` for a blocked whole-GPU job, from whole-GPU buckets.

    Busy nodes (``UNSCHEDULABLE``) are those with at least ``gpus`` GPUs of
    the class; when there are none, all are compared by their GPU count.
    """
    busy = [(idle, names) for (total, idle, _), names in buckets if total >= gpus]
    free = sum(idle * len(names) for idle, names in busy)
    if busy:
        count = max(idle for idle, _ in busy)
        node = min(names[0] for idle, names in busy if idle == count)
        single = sum(len(names) for _, names in busy) == 1
        return Closest(False, single, count, node, total=free)
    count = max(total for (total, _, _), _ in buckets)
    node = min(names[0] for (total, _, _), names in buckets if total == count)
    single = sum(len(names) for _, names in buckets) == 1
    return Closest(True, single, count, node, total=free)


def closest_shared(groups: list[Group], gpus: int, share: int) -> Closest:
    """``gpu_capacity.closest`` for a blocked shared job, over groups of alike nodes."""
    busy = [g for g in groups if len(g[1]) >= gpus and g[1][gpus - 1] >= share]
    ever = not busy
    by_count: tuple[int, str] | None = None
    by_memory: tuple[int, str] | None = None
    for frees, sizes, name, _ in groups if ever else busy:
        held = sizes if ever else frees
        count = _at_least(held, share)
        if by_count is None or (-count, name) < by_count:
            by_count = (-count, name)
        memory = held[0] if held else 0
        if by_memory is None or (-memory, name) < by_memory:
            by_memory = (-memory, name)
    assert by_count is not None and by_memory is not None
    single = sum(g[3] for g in (groups if ever else busy)) == 1
    total = sum(_at_least(frees, share) * n for frees, _, _, n in (groups if ever else busy))
    if by_count[0] == 0:
        return Closest(ever, single, 0, by_count[1], -by_memory[0], by_memory[1], total)
    return Closest(ever, single, -by_count[0], by_count[1], total=total)


def _at_least(descending: tuple[int, ...], value: int) -> int:
    """How many leading items of ``descending`` are at least ``value``."""
    count = 0
    for item in descending:
        if item < value:
            break
        count += 1
    return count
