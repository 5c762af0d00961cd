"""``PricedShares``: the members of a model class by the free memory of their shareable GPUs.

How one-GPU shares placed by price (``policies/share_price/``) find nodes in
O(distinct keys); ``index.ClassIndex.priced`` builds one on first use.
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from typing import Any

from gpudock.scheduler.node_fit import GpuKey, NodeFit

PricedEntry = tuple[Any, ...]
"""``(free shareable memory on the node, name, stamp)`` in ``PricedShares``' heaps (any
length: see ``GpuKey``)."""


class PricedShares:
    """Members under each distinct ``(memory_total, free)`` of their shareable GPUs
    (``fit.shares``), each key's members in a min-heap by ``(free_all, name)``: how one-GPU
    shares placed by price (``policies/share_price/``) find nodes, in O(distinct keys).

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
