"""Capacity index: the available nodes of one GPU-model class, bucketed by what they have free.

A *model class* is the set of GPU product names one model constraint matches
(a ``frozenset``), or ``ANY_MODEL`` for jobs without one. ``NodeFit``
summarises a node for a class with the few numbers the built-in filters and
scorers read. ``ClassIndex`` keeps the class's available nodes in buckets:

* whole-GPU jobs, by ``(GPUs of the class, idle ones, idle GPUs on the
  node)``: a job of ``g`` GPUs looks only at buckets with ``idle >= g`` and
  takes the fewest (binpack) or most (spread) idle GPUs on the node, ties to
  the lowest name. O(buckets) per job: at most (GPUs per node + 1)^2, a
  handful on real clusters;
* shared jobs of ``g`` GPUs, by ``NodeFit.shared_level(g)`` (the largest
  share ``g`` GPUs can take now), each bucket sorted by the node's free
  shareable memory, then name. O(distinct levels) per job.

A reservation changes one node: ``ClassIndex.update`` marks it, and each
bucket structure moves it the next time it is read (O(log nodes)). Building
a class costs O(nodes), once per cycle. ``indexed.py`` turns these answers
into verdicts; ``tests/unit/scheduler/test_indexed.py`` checks them against
the generic path.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from typing import Generic, NamedTuple, Protocol, TypeVar

ModelClass = frozenset[str] | None
ANY_MODEL: ModelClass = None

WholeKey = tuple[int, int, int]  # (GPUs of the class, idle ones, idle GPUs on the node)
K = TypeVar("K")
E = TypeVar("E", str, tuple[int, str])
SharedEntry = tuple[int, str]  # (free memory on the node, negated for spread; name)


class GpuLike(Protocol):
    """What a summary reads of a GPU: a ``GpuView`` or a ``GpuState``."""

    @property
    def name(self) -> str: ...
    @property
    def memory_total(self) -> int: ...
    @property
    def used_memory(self) -> int: ...
    @property
    def exclusive(self) -> bool: ...
    @property
    def shared_jobs(self) -> int: ...
    @property
    def healthy(self) -> bool: ...


class NodeFit(NamedTuple):
    """One node's capacity for one model class, as the built-in policies see it.

    ``total``: GPUs of the class, healthy or not; ``idle``: healthy idle ones
    (``GpuState.idle``); ``frees``: free memory of each healthy GPU of the
    class not held exclusively, largest first; ``sizes``: memory of each GPU
    of the class, largest first. ``idle_all`` and ``free_all`` are the whole
    node's ``NodeState.idle_gpus`` and ``free_memory`` (what scorers read).
    ``only_name``: the product name when all the node's GPUs share one.
    """

    total: int
    idle: int
    frees: tuple[int, ...]
    sizes: tuple[int, ...]
    idle_all: int
    free_all: int
    only_name: str | None

    @property
    def whole_key(self) -> WholeKey:
        """Its bucket for whole-GPU jobs: ``(total, idle, idle_all)``."""
        return (self.total, self.idle, self.idle_all)

    def shared_level(self, gpus: int) -> int | None:
        """The largest share that ``gpus`` GPUs of the class can each take now; None: none can.

        ``GpuCapacity`` passes a shared job of ``gpus`` GPUs and share ``s``
        iff ``gpus`` GPUs have ``s`` free now and ``gpus`` GPUs have at least
        ``s`` in all: iff ``s <= shared_level(gpus)``.
        """
        if len(self.frees) < gpus:
            return None
        free, size = self.frees[gpus - 1], self.sizes[gpus - 1]
        return free if free < size else size


def node_fit(gpus: Iterable[GpuLike], members: ModelClass) -> NodeFit:
    """Summarise one node's GPUs for one model class (``ANY_MODEL``: all of them)."""
    if members is None:
        return _any_fit(gpus)
    total = idle = idle_all = free_all = 0
    frees: list[int] = []
    sizes: list[int] = []
    names: set[str] = set()
    for g in gpus:
        names.add(g.name)
        shareable = g.healthy and not g.exclusive
        is_idle = shareable and g.shared_jobs == 0 and g.used_memory == 0
        free = g.memory_total - g.used_memory
        idle_all += is_idle
        if shareable:
            free_all += free
        if g.name in members:
            total += 1
            idle += is_idle
            sizes.append(g.memory_total)
            if shareable:
                frees.append(free)
    frees.sort(reverse=True)
    sizes.sort(reverse=True)
    only = next(iter(names)) if len(names) == 1 else None
    return NodeFit(total, idle, tuple(frees), tuple(sizes), idle_all, free_all, only)


def _any_fit(gpus: Iterable[GpuLike]) -> NodeFit:
    """``node_fit(gpus, ANY_MODEL)``: the same sums, in the loop every cycle runs per node."""
    idle = free_all = 0
    frees: list[int] = []
    sizes: list[int] = []
    first: str | None = None
    only = True
    for g in gpus:
        if first is None:
            first = g.name
        elif only and g.name != first:
            only = False
        size = g.memory_total
        sizes.append(size)
        if g.healthy and not g.exclusive:
            used = g.used_memory
            frees.append(size - used)
            free_all += size - used
            if g.shared_jobs == 0 and used == 0:
                idle += 1
    frees.sort(reverse=True)
    sizes.sort(reverse=True)
    name = first if only else None
    return NodeFit(len(sizes), idle, tuple(frees), tuple(sizes), idle, free_all, name)


def refit(old: NodeFit, gpus: Iterable[GpuLike], idle_all: int, free_all: int) -> NodeFit:
    """``node_fit(gpus, ANY_MODEL)`` after a reservation changed the node, given ``old``.

    Reservations change no GPU's name or size, so ``total``, ``sizes`` and
    ``only_name`` carry over; ``idle_all`` and ``free_all`` are the node's
    refreshed ``NodeState`` counters.
    """
    frees = [g.memory_total - g.used_memory for g in gpus if g.healthy and not g.exclusive]
    frees.sort(reverse=True)
    return NodeFit(old.total, idle_all, tuple(frees), old.sizes, idle_all, free_all, old.only_name)


def class_fit(base: NodeFit, gpus: Iterable[GpuLike], members: ModelClass) -> NodeFit:
    """``node_fit(gpus, members)``, reusing ``base`` (the ``ANY_MODEL`` fit) when it is the same."""
    if members is None:
        return base
    if base.only_name is not None or base.total == 0:  # one product name, or no GPUs
        if base.only_name in members:
            return base
        return NodeFit(0, 0, (), (), base.idle_all, base.free_all, base.only_name)
    return node_fit(gpus, members)


class Buckets(Generic[K, E]):
    """Members in buckets ``bucket(fit)`` (None: in none) as ``entry(name, fit)``, sorted.

    The first entry of a bucket is its best. Members marked dirty are moved
    when the buckets are next read, so a structure that is rarely read (a
    model class, two-GPU shares) moves a node once however often it changed.
    Empty buckets are dropped.
    """

    def __init__(
        self,
        fits: dict[str, NodeFit],
        bucket: Callable[[NodeFit], K | None],
        entry: Callable[[str, NodeFit], E],
    ) -> None:
        self._bucket: Callable[[NodeFit], K | None] = bucket
        self._entry: Callable[[str, NodeFit], E] = entry
        self._placed: dict[str, NodeFit] = {}  # the fit each member is bucketed by
        self._buckets: dict[K, list[E]] = {}
        self._dirty: set[str] = set()
        for name, fit in fits.items():
            key = bucket(fit)
            if key is not None:
                self._placed[name] = fit
                self._buckets.setdefault(key, []).append(entry(name, fit))
        for entries in self._buckets.values():
            entries.sort()

    def mark(self, name: str) -> None:
        self._dirty.add(name)

    def read(self, fits: dict[str, NodeFit]) -> dict[K, list[E]]:
        """The buckets, after moving the dirty members to where their ``fits`` put them."""
        for name in self._dirty:
            self._move(name, fits[name])
        self._dirty.clear()
        return self._buckets

    def _move(self, name: str, fit: NodeFit) -> None:
        old = self._placed.get(name)
        old_key = None if old is None else self._bucket(old)
        new_key = self._bucket(fit)
        new_entry = self._entry(name, fit)
        if old is not None and old_key is not None:
            old_entry = self._entry(name, old)
            if (old_key, old_entry) == (new_key, new_entry):
                self._placed[name] = fit
                return
            entries = self._buckets[old_key]
            del entries[bisect_left(entries, old_entry)]
            if not entries:
                del self._buckets[old_key]
        if new_key is None:
            self._placed.pop(name, None)
        else:
            self._placed[name] = fit
            insort(self._buckets.setdefault(new_key, []), new_entry)


class ClassIndex:
    """The available nodes with a GPU of one model class, bucketed by free capacity.

    ``sign`` is 1 for binpack (fewest free first) and -1 for spread (most
    free first). ``fits`` is every available member's current fit.
    """

    def __init__(self, fits: dict[str, NodeFit], sign: int) -> None:
        self.fits = fits
        self.version = 0  # counts updates
        self._sign = sign
        self._whole: Buckets[WholeKey, str] = Buckets(fits, _whole_key, _name)
        self._shared: dict[int, Buckets[int, SharedEntry]] = {}  # by the job's GPU count

    def whole(self) -> dict[WholeKey, list[str]]:
        """Whole-GPU buckets: ``(total, idle, idle_all)`` -> names, ascending."""
        return self._whole.read(self.fits)

    def best_whole(self, gpus: int) -> str | None:
        """The best node with ``gpus`` idle GPUs of the class (by ``idle_all``)."""
        best: tuple[int, str] | None = None
        sign = self._sign
        for (_, idle, idle_all), names in self.whole().items():
            if idle >= gpus:
                candidate = (sign * idle_all, names[0])
                if best is None or candidate < best:
                    best = candidate
        return None if best is None else best[1]

    def best_shared(self, gpus: int, share: int) -> str | None:
        """The best node where ``gpus`` GPUs of the class take ``share`` each (by ``free_all``)."""
        structure = self._shared.get(gpus)
        if structure is None:
            sign = self._sign
            structure = self._shared[gpus] = Buckets(
                self.fits,
                lambda fit: fit.shared_level(gpus),
                lambda name, fit: (sign * fit.free_all, name),
            )
        best: SharedEntry | None = None
        for level, entries in structure.read(self.fits).items():
            if level >= share:
                candidate = entries[0]
                if best is None or candidate < best:
                    best = candidate
        return None if best is None else best[1]

    def update(self, name: str, fit: NodeFit) -> None:
        """Record the new ``fit`` of ``name`` (an available member); buckets follow when read."""
        self.fits[name] = fit
        self.version += 1
        self._whole.mark(name)
        for structure in self._shared.values():
            structure.mark(name)


def _whole_key(fit: NodeFit) -> WholeKey:
    return fit.whole_key


def _name(name: str, fit: NodeFit) -> str:
    return name
