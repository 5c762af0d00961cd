"""Reading the capacity index's buckets: a class's nodes that can take a job's GPUs now
(``rules.gpus_fit``), best first (``walk``, ``first_node``), and what a walk's ceiling may
read of a part's nodes (``node_shapes``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from typing import TypeVar

from gpudock.scheduler.accel.catalog import ModelClassIndex, Part
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.declarations import Shapes
from gpudock.scheduler.node_fit import WholeKey
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


def node_shapes(state: CycleState, part: Part) -> Shapes | None:
    """``declarations.Shapes`` of ``part``'s members (their snapshot views and the GPUs of
    their ``ANY_MODEL`` fits: reservations change neither); None when a member does not
    count CPUs."""
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
    return frozenset(shapes), most_free


def walk(klass: ModelClassIndex, job: JobRequest) -> Iterator[tuple[int, str]]:
    """Every node of ``klass`` that can take ``job``'s GPUs now, by ``(rank, name)``, lazily
    merged (``WalkedVerdicts.best``); the first is ``first_node``'s."""
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
    ``walk`` yields: the best of the parts' best nodes (parts caught up)."""
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
