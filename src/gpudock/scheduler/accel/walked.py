"""Verdicts that walk a class's nodes best first: for an order scored along the walk, for
per-node rules to check (CPUs, host memory), and for one-GPU shares placed by price.

``WalkedVerdicts`` walks the buckets that can take the job's GPUs in the declared order
(``declarations.Walked``), checks each node's rules and undeclared filters, and scores
it with the declared ``score`` until no node still to come can score higher
(``ceiling``). ``PricedVerdicts`` orders the nodes by the declared loss of their GPUs
(``declarations.Priced``). ``indexed.py`` says what the walks rely on.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Callable

from gpudock.scheduler.accel.priced_shares import PricedEntry, PricedShares
from gpudock.scheduler.accel.verdicts import ClassVerdicts, KeyContext
from gpudock.scheduler.accel.walks import first_node, node_shapes, walk
from gpudock.scheduler.declarations import Priced, Shapes, Walked, room_of_fit
from gpudock.scheduler.node_fit import GpuKey

__all__ = ["PricedVerdicts", "WalkedVerdicts"]


class WalkedVerdicts(ClassVerdicts):
    """``KeyVerdicts`` for a single-node job whose order is scored along the walk, or that has
    a per-node rule to check (module doc).

    ``best`` walks the buckets by the declared order, then name, skipping nodes a rule
    or an undeclared filter rejects. For an exact order the first node left is the best;
    else each is scored by the declared ``score`` of its ``NodeRoom`` until the best so
    far scores at least the ``ceiling`` of the next rank (ties to the lower name, met
    first). When the buckets' first node (``first_node``) settles it, no walk is set up.
    """

    def __init__(self, key: KeyContext, order: Walked, shapes: dict[int, Shapes | None]) -> None:
        super().__init__(key)
        self._order = order
        self._shapes = shapes  # per part (by id), shared by the cycle's keys
        self._ceiling: Callable[[int], float] | None = None

    def best(self) -> str | None:
        """The best feasible node, or None; once None, None for the rest of the cycle."""
        extra = self._extra
        if self._blocked == self._state.released or (extra is not None and self.none_still()):
            return None
        self._catalog.catch_up(self._class)
        first = first_node(self._class, self._job)
        if first is None:
            self.block(True)
            return None
        if extra is not None:
            extra.vetoed = False
        judged = self._judge(first[1])  # usually the answer: then no walk
        if judged is not None and self._settles(judged, first[0]):
            return first[1]
        best: tuple[float, str] | None = None  # (-score, name)
        for rank, name in walk(self._class, self._job):
            if best is not None:
                ceiling = self._bound(rank)
                if -best[0] > ceiling or (-best[0] == ceiling and best[1] < name):
                    break  # no node still to come scores higher
            score = self._judge(name)
            if score is None:
                continue
            if self._order.score is None:
                best = (0.0, name)  # an exact order: the first that fits
                break
            if best is None or (-score, name) < best:
                best = (-score, name)
        if extra is None:
            self.block(best is None)
            return None if best is None else best[1]
        self.block(best is None and not extra.vetoed)
        return extra.found(None if best is None else best[1])

    def _settles(self, score: float, rank: int) -> bool:
        """A first node that scores ``score`` at ``rank`` is the best of all."""
        return self._order.score is None or score >= self._bound(rank)

    def _bound(self, rank: int) -> float:
        """The declared ``ceiling`` at ``rank`` (built on first need)."""
        if self._ceiling is None:
            ceiling = self._order.ceiling
            assert ceiling is not None, "a scored walk declares its ceiling"
            self._ceiling = ceiling(self._walked_shapes)
        return self._ceiling(rank)

    def _walked_shapes(self) -> Shapes | None:
        """``Shapes`` of the class's members; None when one does not count CPUs."""
        sizes: set[tuple[float, int, int]] = set()
        most_free = 0.0
        for part in self._class.parts:
            if id(part) not in self._shapes:
                self._shapes[id(part)] = node_shapes(self._key.state, part)
            found = self._shapes[id(part)]
            if found is None:
                return None
            sizes |= found[0]
            most_free = max(most_free, found[1])
        return frozenset(sizes), most_free

    def _judge(self, name: str) -> float | None:
        """None when node ``name`` lacks the job's CPUs or memory, or a filter that declares
        nothing rejects it; else its score (0.0 for an exact order)."""
        key = self._key
        if not key.host_fits(name):
            return None
        if self._extra is not None and not self._extra.passes(name):
            return None
        score = self._order.score
        if score is None:
            return 0.0
        state = key.state
        cpus = state.views[name].cpus
        free = 0.0 if cpus is None else state.nodes.free_cpus_of(name)
        return score(room_of_fit(state.fit(name), cpus, free))

    def ranked(self) -> list[str]:
        raise AssertionError("gangs with per-node rules take the generic path")


class PricedVerdicts(ClassVerdicts):
    """``KeyVerdicts`` for a one-GPU share whose scorer declares ``Priced``.

    A node's place is the least loss among its usable GPUs, then its free shareable
    memory, then its name. Each part's ``PricedShares`` keeps the members under each
    ``(memory_total, free)`` of their GPUs in a heap; this key keeps the keys that hold
    the share sorted by loss (``_ordered``), so with no per-node rule the best node is
    the best head among the heaps of the least loss. Else the heaps are walked in that
    order, merged, each node judged once (``judge``: its score and the GPUs it would
    strand), until a node that fits and strands nothing: every later one loses as much
    or more.
    """

    def __init__(self, key: KeyContext, priced: Priced) -> None:
        super().__init__(key)
        self._priced = priced
        self._walks = key.cpus or key.memory
        self._keys: list[tuple[int, int, GpuKey]] = []  # (loss, part, key), ascending
        self._known: set[tuple[int, GpuKey]] = set()  # (part, key) in ``_keys``
        self._read: list[int] = [0] * len(key.klass.parts)  # how far each part's log was read

    def best(self) -> str | None:
        """The best feasible node, or None; once None, None for the rest of the cycle."""
        extra = self._extra
        if self._blocked == self._state.released or (extra is not None and self.none_still()):
            return None
        self._catalog.catch_up(self._class)
        by_part = [part.index.priced() for part in self._class.parts]
        keys = self._ordered(by_part)
        if not self._walks:
            found: PricedEntry | None = None  # (free_all, name, stamp) of the best head
            least = 0  # its loss
            for lost, part, key in keys:
                if found is not None and lost > least:
                    break  # every heap still to come loses more
                head = by_part[part].head(key)
                if head is not None and (found is None or head < found):
                    found, least = head, lost  # keys come by loss: never less than least
            if extra is None or found is None:
                self.block(found is None)
                return None if found is None else str(found[1])
            if extra.passes(str(found[1])):
                return str(found[1])  # the best node, and the unknown filters admit it
        if extra is not None:
            extra.vetoed = False
        name = self._walk_priced(keys, by_part)
        if extra is None:
            self.block(name is None)
            return name
        self.block(name is None and not extra.vetoed)
        return extra.found(name)

    def ranked(self) -> list[str]:
        raise AssertionError("gangs of shares take the generic path")

    def _ordered(self, by_part: list[PricedShares]) -> list[tuple[int, int, GpuKey]]:
        """``_keys`` with the keys each part has made since the last call that hold the share
        (a key whose heap is gone stays: readers skip it)."""
        share = self._job.gpu_memory
        assert share is not None
        keys, known, loss = self._keys, self._known, self._priced.loss
        for part, shares in enumerate(by_part):
            log, start = shares.log, self._read[part]
            if start == len(log):
                continue
            for key in log[start:]:
                size, free = key
                if free >= share and size >= share and (part, key) not in known:
                    known.add((part, key))
                    insort(keys, (loss(size, free, share), part, key))
            self._read[part] = len(log)
        return keys

    def _walk_priced(
        self, keys: list[tuple[int, int, GpuKey]], by_part: list[PricedShares]
    ) -> str | None:
        """The best node that has the job's CPUs and memory, walking the heaps in ``keys``'
        order merged, each heap in order without popping it (a heap's position ``i`` comes
        before ``2i + 1`` and ``2i + 2``), untrue entries skipped (class doc)."""
        job, ctx, judge, extra = self._job, self._key, self._priced.judge, self._extra
        state = ctx.state
        views, free_cpus_of = state.views, state.nodes.free_cpus_of
        fits = [part.index.fits for part in self._class.parts]
        heap: list[tuple[int, int, str, int, int, int]] = []  # (loss, entry, walk, at)
        walked: list[tuple[list[PricedEntry], PricedShares]] = []
        seen: set[str] = set()
        best: tuple[float, str] | None = None  # (-score, name)
        at_key = 0
        while True:
            while at_key < len(keys) and (not heap or keys[at_key][0] <= heap[0][0]):
                lost, part, key = keys[at_key]
                at_key += 1
                entries = by_part[part].heaps.get(key)
                if entries:
                    top = entries[0]
                    heapq.heappush(heap, (lost, top[0], top[1], top[2], len(walked), 0))
                    walked.append((entries, by_part[part]))
            if not heap:
                break
            lost, free_all, name, stamp, i, at = heapq.heappop(heap)
            entries, shares = walked[i]
            for child in (2 * at + 1, 2 * at + 2):
                if child < len(entries):
                    item = entries[child]
                    heapq.heappush(heap, (lost, item[0], item[1], item[2], i, child))
            if name in seen or not shares.valid((free_all, name, stamp)):
                continue
            seen.add(name)
            if not ctx.host_fits(name):
                continue
            if extra is not None and not extra.passes(name):
                continue
            cpus = views[name].cpus
            fit = next(part[name] for part in fits if name in part)
            judged = judge(
                job,
                fit.shares,
                state.fit(name).shares,
                free_all,
                None if cpus is None else free_cpus_of(name),
            )
            if judged is None:
                continue
            entry = (-judged[0], name)
            if best is None or entry < best:
                best = entry
            if judged[1] == 0.0:
                break  # no node still to come scores higher (class doc)
        return None if best is None else best[1]
