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
an index costs O(nodes); ``ClassIndex.copy`` is the cheap way to start a
cycle from an index brought up to date (``catalog.py`` keeps the last
cycle's). ``catalog.py`` assembles classes from indexes, ``indexed.py``
turns their answers into verdicts; ``tests/unit/scheduler/accel/test_indexed.py``
checks them against the generic path.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from heapq import heapify, heappop, heappush
from itertools import groupby
from operator import itemgetter
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

ModelClass = frozenset[str] | None
ANY_MODEL: ModelClass = None

WholeKey = tuple[int, int, int]  # (GPUs of the class, idle ones, idle GPUs on the node)
GpuKey = tuple[int, ...]
"""``(memory_total, free bytes)`` of a GPU shares may use. Typed as a tuple of any length so
that compiled code passes the objects as they are: it unboxes a fixed-length tuple into
its fields and boxes it again (a new tuple and ints) wherever it is used as a dict key."""
PricedEntry = tuple[Any, ...]
"""``(free shareable memory on the node, name, stamp)`` in ``PricedShares``' heaps (any
length: see ``GpuKey``)."""
PRICED = 0
"""In ``ClassIndex.shapes``: ``priced`` has been asked for (no shared job has 0 GPUs)."""
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
    ``shares``: ``(memory_total, free)`` of each healthy GPU of the class not held
    exclusively, in GPU order (``pricing.Pair``: what share prices read).
    """

    total: int
    idle: int
    frees: tuple[int, ...]
    sizes: tuple[int, ...]
    idle_all: int
    free_all: int
    only_name: str | None
    shares: tuple[GpuKey, ...] = ()

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


_fit = tuple.__new__
"""``NodeFit(*fields)`` without the Python-level ``__new__`` of a named tuple (hot paths)."""


def node_fit(gpus: Iterable[GpuLike], members: ModelClass) -> NodeFit:
    """Summarise one node's GPUs for one model class (``ANY_MODEL``: all of them)."""
    if members is None:
        return _any_fit(gpus)
    total = idle = idle_all = free_all = 0
    frees: list[int] = []
    sizes: list[int] = []
    pairs: list[GpuKey] = []
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
                pairs.append((g.memory_total, free))
    frees.sort(reverse=True)
    sizes.sort(reverse=True)
    only = next(iter(names)) if len(names) == 1 else None
    return NodeFit(total, idle, tuple(frees), tuple(sizes), idle_all, free_all, only, tuple(pairs))


def _any_fit(gpus: Iterable[GpuLike]) -> NodeFit:
    """``node_fit(gpus, ANY_MODEL)``: the same sums, in the loop every cycle runs per node."""
    idle = free_all = 0
    frees: list[int] = []
    sizes: list[int] = []
    pairs: list[GpuKey] = []
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
            pairs.append((size, size - used))
            free_all += size - used
            if g.shared_jobs == 0 and used == 0:
                idle += 1
    frees.sort(reverse=True)
    sizes.sort(reverse=True)
    name = first if only else None
    return _fit(
        NodeFit,
        (len(sizes), idle, tuple(frees), tuple(sizes), idle, free_all, name, tuple(pairs)),
    )


def refit(old: NodeFit, gpus: Iterable[GpuLike], idle_all: int, free_all: int) -> NodeFit:
    """``node_fit(gpus, ANY_MODEL)`` after a reservation changed the node, given ``old``.

    Reservations change no GPU's name or size, so ``total``, ``sizes`` and
    ``only_name`` carry over; ``idle_all`` and ``free_all`` are the node's
    refreshed ``NodeState`` counters.
    """
    pairs = tuple(
        (g.memory_total, g.memory_total - g.used_memory)
        for g in gpus
        if g.healthy and not g.exclusive
    )
    frees = [free for _, free in pairs]
    frees.sort(reverse=True)
    fields = (old.total, idle_all, tuple(frees), old.sizes, idle_all, free_all, old.only_name)
    return _fit(NodeFit, (*fields, pairs))


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
    """Members in buckets ``bucket(fit)`` (None: in none), sorted by their entry.

    A member's entry is its name, or ``(value(fit), name)`` when ``value`` is
    given; the first entry of a bucket is its best. Members marked dirty are
    moved when the buckets are next read, so a structure that is rarely read
    (a model class, two-GPU shares) moves a node once however often it
    changed. Empty buckets are dropped.
    """

    __slots__ = ("_bucket", "_buckets", "_dirty", "_keys", "_rank", "_value", "_values", "ranked")

    def __init__(
        self,
        fits: dict[str, NodeFit],
        bucket: Callable[[NodeFit], K | None],
        value: Callable[[NodeFit], int] | None = None,
        rank: Callable[[K], int] | None = None,
    ) -> None:
        self._bucket: Callable[[NodeFit], K | None] = bucket
        self._value = value
        self._rank = rank
        self.ranked: list[tuple[int, K]] = []  # with ``rank``: (rank, bucket) of each bucket
        self._keys: dict[str, K] = {}  # each member's bucket
        self._values: dict[str, int] = {}  # each member's value (with ``value``)
        self._buckets: dict[K, list[E]] = {}
        self._dirty: set[str] = set()
        if value is None:
            self._fill(fits, bucket)
        else:
            self._fill_valued(fits, bucket, value)
        if rank is not None:
            self.ranked = sorted((rank(key), key) for key in self._buckets)

    def _fill(self, fits: dict[str, NodeFit], bucket: Callable[[NodeFit], K | None]) -> None:
        """Entries are names: each bucket's names, sorted."""
        keys = self._keys
        buckets: dict[K, list[Any]] = self._buckets
        for name, key in zip(fits, map(bucket, fits.values()), strict=True):
            if key is None:
                continue
            keys[name] = key
            entries = buckets.get(key)
            if entries is None:
                buckets[key] = [name]
            else:
                entries.append(name)
        for entries in buckets.values():
            entries.sort()

    def _fill_valued(
        self,
        fits: dict[str, NodeFit],
        bucket: Callable[[NodeFit], K | None],
        value: Callable[[NodeFit], int],
    ) -> None:
        """Entries are ``(value, name)``: one sort of ``(bucket, value, name)``, split by bucket
        (most nodes of a busy cluster differ, so sorting beats grouping equal fits)."""
        rows = sorted(
            [
                (key, level, name)
                for key, level, name in zip(
                    map(bucket, fits.values()), map(value, fits.values()), fits, strict=True
                )
                if key is not None
            ]
        )
        self._keys = {name: key for key, _, name in rows}
        self._values = {name: level for _, level, name in rows}
        buckets: dict[K, list[Any]] = self._buckets
        for key, group in groupby(rows, _first):
            buckets[key] = [(level, name) for _, level, name in group]

    def mark(self, name: str) -> None:
        self._dirty.add(name)

    def copy(self, fits: dict[str, NodeFit]) -> Buckets[K, E]:
        """An independent copy, after moving the dirty members to where ``fits`` put them."""
        buckets = self.read(fits)
        # made empty, then filled (not ``Buckets.__new__``: compiled, it runs ``__init__``)
        clone: Buckets[K, E] = Buckets({}, self._bucket, self._value, self._rank)
        clone.ranked = list(self.ranked)
        clone._keys = dict(self._keys)
        clone._values = dict(self._values)
        clone._buckets = {key: list(entries) for key, entries in buckets.items()}
        clone._dirty = set()
        return clone

    def read(self, fits: dict[str, NodeFit]) -> dict[K, list[E]]:
        """The buckets, after moving the dirty members to where their ``fits`` put them."""
        for name in self._dirty:
            self._move(name, fits[name])
        self._dirty.clear()
        return self._buckets

    def _move(self, name: str, fit: NodeFit) -> None:
        key = self._bucket(fit)
        valued = self._value is not None
        level = self._value(fit) if self._value is not None and key is not None else 0
        old_key = self._keys.get(name)
        buckets: dict[K, list[Any]] = self._buckets
        if old_key is not None:
            old_level = self._values.get(name, 0)
            if old_key == key and old_level == level:
                return
            entries = buckets[old_key]
            del entries[bisect_left(entries, (old_level, name) if valued else name)]
            if not entries:
                del buckets[old_key]
                if self._rank is not None:
                    ranked = (self._rank(old_key), old_key)
                    del self.ranked[bisect_left(self.ranked, ranked)]
        if key is None:
            self._keys.pop(name, None)
            self._values.pop(name, None)
            return
        self._keys[name] = key
        if valued:
            self._values[name] = level
        target = buckets.get(key)
        if target is None:
            target = buckets[key] = []
            if self._rank is not None:
                insort(self.ranked, (self._rank(key), key))
        insort(target, (level, name) if valued else name)


class ClassIndex:
    """The available nodes with a GPU of one model class, bucketed by free capacity.

    ``sign`` is 1 for binpack (fewest free first) and -1 for spread (most
    free first). ``fits`` is every available member's current fit.
    ``shapes``: the GPU counts shared jobs have asked for (their structures
    are built on first use), and ``PRICED`` once ``priced`` has been asked for;
    shared with every ``copy``.
    """

    __slots__ = ("_priced", "_shared", "_sign", "_whole", "fits", "shapes", "version")

    def __init__(self, fits: dict[str, NodeFit], sign: int) -> None:
        self.fits = fits
        self.version = 0  # counts updates
        self.shapes: set[int] = set()
        self._sign = sign
        self._whole: Buckets[WholeKey, str] = Buckets(
            fits, _whole_key, rank=lambda key: sign * key[2]
        )
        self._shared: dict[int, Buckets[int, SharedEntry]] = {}  # by the job's GPU count
        self._priced: PricedShares | None = None  # built on first use

    def copy(self) -> ClassIndex:
        """An independent copy of the index as it is now, with the structures built so far."""
        # made empty, then filled (not ``ClassIndex.__new__``: compiled, it runs ``__init__``)
        clone = ClassIndex({}, self._sign)
        clone.fits = dict(self.fits)
        clone.shapes = self.shapes
        clone._whole = self._whole.copy(self.fits)
        clone._shared = {gpus: s.copy(self.fits) for gpus, s in self._shared.items()}
        if self._priced is not None:
            clone._priced = self._priced.copy(self.fits)
        return clone

    def priced(self) -> PricedShares:
        """The members by each ``(memory_total, free)`` of their shareable GPUs of the class
        (``PricedShares``; built on first use), brought up to date."""
        if self._priced is None:
            self.shapes.add(PRICED)
            self._priced = PricedShares(self.fits)
        self._priced.read(self.fits)
        return self._priced

    def shared(self, gpus: int) -> Buckets[int, SharedEntry]:
        """The buckets for shared jobs of ``gpus`` GPUs, built on first use."""
        structure = self._shared.get(gpus)
        if structure is None:
            self.shapes.add(gpus)
            sign = self._sign
            structure = self._shared[gpus] = Buckets(
                self.fits,
                _shared_level(gpus),
                _free_all if sign == 1 else lambda fit: sign * fit.free_all,
            )
        return structure

    def whole(self) -> dict[WholeKey, list[str]]:
        """Whole-GPU buckets: ``(total, idle, idle_all)`` -> names, ascending."""
        return self._whole.read(self.fits)

    def ranked_whole(self) -> list[tuple[int, WholeKey]]:
        """Whole-GPU buckets as ``(sign * idle_all, key)``, best first (read after ``whole``)."""
        self._whole.read(self.fits)
        return self._whole.ranked

    def best_whole(self, gpus: int) -> tuple[int, str] | None:
        """``(sign * idle_all, name)`` of the best node with ``gpus`` idle GPUs of the class."""
        buckets = self.whole()
        best: tuple[int, str] | None = None
        for rank, key in self._whole.ranked:  # by ``sign * idle_all``
            if best is not None and rank > best[0]:
                break  # no better node comes after
            if key[1] >= gpus:
                candidate = (rank, buckets[key][0])
                if best is None or candidate < best:
                    best = candidate
        return best

    def best_shared(self, gpus: int, share: int) -> SharedEntry | None:
        """``(sign * free_all, name)`` of the best node where ``gpus`` GPUs of the class take
        ``share`` each."""
        best: SharedEntry | None = None
        for level, entries in self.shared(gpus).read(self.fits).items():
            if level >= share:
                candidate = entries[0]
                if best is None or candidate < best:
                    best = candidate
        return best

    def update(self, name: str, fit: NodeFit) -> None:
        """Record the new ``fit`` of ``name`` (an available member); buckets follow when read."""
        self.fits[name] = fit
        self.version += 1
        self._whole._dirty.add(name)  # ``mark``, inlined: this runs per reservation
        for structure in self._shared.values():
            structure._dirty.add(name)
        if self._priced is not None:
            self._priced.dirty.add(name)


class PricedShares:
    """Members under each distinct ``(memory_total, free)`` of their shareable GPUs
    (``fit.shares``), each key's members in a min-heap by ``(free_all, name)``: how one-GPU
    shares placed by price (``scheduler/pricing.py``) find nodes, in O(distinct keys).

    The heaps are lazy. An entry is ``(free_all, name, stamp)``: ``stamp`` numbers the
    member's states, so an entry is true while its member's stamp is still the one it
    carries (``valid``). A member marked dirty whose shares or ``free_all`` changed gets a
    new stamp and is pushed under its keys when next read (O(log members) each, nothing
    removed); an untrue entry is dropped when it reaches a head (``head``) and skipped by
    a reader walking a heap. Once more than half the entries are untrue the heaps are
    rebuilt, so they stay O(members x keys) however long the index lives. ``log`` lists
    the keys in the order their heaps were made (a key whose heap emptied and came back
    is listed again), so that a reader can keep its own order of the keys and add only
    new ones.
    """

    __slots__ = ("_heaps", "_of", "_size", "_stale", "_stamp", "dirty", "log")

    def __init__(self, fits: dict[str, NodeFit]) -> None:
        # member -> (its distinct keys, free_all, stamp)
        self._of: dict[str, tuple[tuple[GpuKey, ...], int, int]] = {
            name: (distinct(fit.shares), fit.free_all, 0) for name, fit in fits.items()
        }
        self.dirty: set[str] = set()
        self._stamp = 0  # the last stamp given
        self._heaps: dict[GpuKey, list[PricedEntry]] = {}  # lazy min-heaps (class doc)
        self._size = 0  # entries in the heaps
        self._stale = 0  # of which untrue
        self._build()
        self.log: list[GpuKey] = list(self._heaps)  # every key in order of its heap's creation

    def _build(self) -> None:
        """The heaps of ``_of``, with no untrue entry."""
        heaps: dict[GpuKey, list[PricedEntry]] = {}
        size = 0
        for name, (keys, free_all, stamp) in self._of.items():
            entry = (free_all, name, stamp)
            size += len(keys)
            for key in keys:
                entries = heaps.get(key)
                if entries is None:
                    heaps[key] = [entry]
                else:
                    entries.append(entry)
        for entries in heaps.values():
            heapify(entries)
        self._heaps, self._size, self._stale = heaps, size, 0

    def copy(self, fits: dict[str, NodeFit]) -> PricedShares:
        """An independent copy, after pushing the dirty members."""
        heaps = self.read(fits)
        clone = PricedShares({})
        clone._heaps = {key: list(entries) for key, entries in heaps.items()}
        clone._of = dict(self._of)
        clone._stamp, clone._size, clone._stale = self._stamp, self._size, self._stale
        clone.log = list(heaps)
        return clone

    @property
    def heaps(self) -> dict[GpuKey, list[PricedEntry]]:
        """Each key's heap (may hold untrue entries), as of the last ``read``."""
        return self._heaps

    def valid(self, entry: PricedEntry) -> bool:
        """True when ``entry`` is true now (its member's state is the one it was pushed in)."""
        stamp: int = entry[2]
        return self._of[entry[1]][2] == stamp

    def head(self, key: GpuKey) -> PricedEntry | None:
        """The least ``(free_all, name)`` entry under ``key`` (untrue entries on top are
        dropped), or None when no member is under it."""
        entries = self._heaps.get(key)
        if entries is None:
            return None
        of = self._of
        while entries:
            entry = entries[0]
            if of[entry[1]][2] == entry[2]:
                return entry
            heappop(entries)
            self._size -= 1
            self._stale -= 1
        del self._heaps[key]
        return None

    def read(self, fits: dict[str, NodeFit]) -> dict[GpuKey, list[PricedEntry]]:
        """The heaps, after pushing each dirty member that changed under its keys."""
        heaps, of = self._heaps, self._of
        for name in self.dirty:
            fit = fits[name]
            keys, free_all = distinct(fit.shares), fit.free_all
            old = of.get(name)
            if old is not None:
                if old[1] == free_all and old[0] == keys:
                    continue
                self._stale += len(old[0])
            self._stamp += 1
            of[name] = (keys, free_all, self._stamp)
            entry = (free_all, name, self._stamp)
            self._size += len(keys)
            for key in keys:
                target = heaps.get(key)
                if target is None:
                    heaps[key] = [entry]
                    self.log.append(key)
                else:
                    heappush(target, entry)
        self.dirty.clear()
        if self._stale > 64 and 2 * self._stale > self._size:
            self._build()
        return self._heaps


def distinct(keys: tuple[GpuKey, ...]) -> tuple[GpuKey, ...]:
    """``keys`` without repeats, in first-seen order."""
    return keys if len(keys) < 2 else tuple(dict.fromkeys(keys))


_free_all = itemgetter(5)
"""``NodeFit.free_all``, without a Python call."""


def _shared_level(gpus: int) -> Callable[[NodeFit], int | None]:
    """``NodeFit.shared_level(gpus)`` as one function (a bucket key, on hot paths)."""
    at = gpus - 1

    def level(fit: NodeFit) -> int | None:
        frees = fit[2]
        if len(frees) < gpus:
            return None
        free, size = frees[at], fit[3][at]
        return free if free < size else size

    return level


_first = itemgetter(0)
"""The first item of a tuple, without a Python call."""

_whole_key = itemgetter(0, 1, 4)
"""``NodeFit.whole_key`` (``total``, ``idle``, ``idle_all``), without a Python call."""
