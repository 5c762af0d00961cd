"""Capacity index: the available nodes of one GPU-model class, bucketed by what they have free.

A *model class* is the set of GPU product names one model constraint matches, or
``ANY_MODEL``; ``NodeFit`` (``scheduler/node_fit.py``) summarises a node for a class.
``ClassIndex`` keeps the class's available nodes in buckets:

* whole-GPU jobs, by ``(GPUs of the class, idle ones, idle GPUs on the node)``: a job
  of ``g`` GPUs reads the buckets with ``idle >= g``, fewest (or most) idle GPUs on
  the node first, ties to the lowest name: O(buckets), at most (GPUs per node + 1)^2;
* shared jobs of ``g`` GPUs, by ``NodeFit.shared_level(g)`` (the largest share ``g``
  GPUs can take now), each bucket by free shareable memory, then name.

A reservation changes one node: ``ClassIndex.update`` marks it, and each bucket
structure moves it when next read (O(log nodes)). ``ClassIndex.copy`` starts a cycle
from an index brought up to date (``catalog.py`` keeps the last cycle's);
``priced_shares.py`` orders one-GPU shares by price.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable
from itertools import groupby
from operator import itemgetter
from typing import Any, Generic, TypeVar

from gpudock.scheduler.accel.priced_shares import PricedShares
from gpudock.scheduler.node_fit import NodeFit, WholeKey

__all__ = ["PRICED", "Buckets", "ClassIndex", "SharedEntry"]

PRICED = 0
"""In ``ClassIndex.shapes``: ``priced`` has been asked for (no shared job has 0 GPUs)."""
K = TypeVar("K")
E = TypeVar("E", str, tuple[int, str])
SharedEntry = tuple[int, str]  # (free memory on the node, negated for spread; name)


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
        self._whole._dirty.add(name)  # marked dirty: moved when next read
        for structure in self._shared.values():
            structure._dirty.add(name)
        if self._priced is not None:
            self._priced.dirty.add(name)


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
