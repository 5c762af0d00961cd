"""Verdicts for single-node jobs that ask for CPUs, or for one-GPU shares placed by price.

``CpuVerdicts`` walks a model class's buckets best first and checks each node's
free CPUs (``cpu_capacity``) and, under ``binpack``'s CPU rule, its score;
``PricedVerdicts`` orders the nodes by the share price of their GPUs
(``policies/share_price/``). See ``indexed.py`` for what the walks rely on.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Callable, Iterator
from functools import cached_property

from gpudock.core.job import PendingReason
from gpudock.scheduler.accel.catalog import (
    Catalog,
    ModelClassIndex,
)
from gpudock.scheduler.accel.extra import ExtraFilters
from gpudock.scheduler.accel.index import (
    GpuKey,
    PricedEntry,
    PricedShares,
)
from gpudock.scheduler.accel.verdicts import IndexedVerdicts
from gpudock.scheduler.accel.walks import Shapes, first_node, node_shapes, walk
from gpudock.scheduler.capacity import CycleState, left_after
from gpudock.scheduler.policies.binpack import packed, stranded_gpus
from gpudock.scheduler.policies.cpu_capacity import cpus_fit_on
from gpudock.scheduler.policies.share_price.pricing import SharePricing
from gpudock.scheduler.snapshot import JobRequest


class CpuVerdicts:
    """``KeyVerdicts`` for a single-node job asking for CPUs (some node counts them).

    ``best`` walks the class's buckets that can take the job's GPUs, best
    first by the score without CPUs (``sign * idle_all`` or ``sign *
    free_all``), then name, and skips nodes without the CPUs free
    (``cpu_capacity``). Without the CPU rule (``spread``, or ``binpack``
    with ``cpu_aware`` off) the first node left is the best. With it, each
    node is scored as ``Binpack.score`` scores it (``packed``: stranded
    capacity first) and the walk stops at the first node that strands
    nothing: every later one has as much capacity left or more, so it
    scores no higher, and ties go to the lower name, met first. The walk's
    first node is the one ``IndexedVerdicts`` would answer (``first_node``,
    from the buckets' heads); when it settles the answer (it has the CPUs
    and, under the rule, strands nothing), no walk is set up at all.
    ``reasons`` are worded from the index too (``reasons``).
    """

    def __init__(
        self,
        job: JobRequest,
        catalog: Catalog,
        klass: ModelClassIndex,
        state: CycleState,
        cpu_rule: bool,
        shapes: dict[int, Shapes] | None = None,
        extra: ExtraFilters | None = None,
    ) -> None:
        self._job = job  # any job with this key
        self._catalog = catalog
        self._class = klass
        self._state = state
        self._cpu_rule = cpu_rule
        self._shapes = shapes if shapes is not None else {}
        self._extra = extra
        self._reasons: tuple[int, list[PendingReason]] | None = None  # (changes seen, reasons)
        self.blocked = False

    def best(self) -> str | None:
        """The best feasible node, or None; once None, None for the rest of the cycle."""
        extra = self._extra
        if self.blocked or (extra is not None and extra.unchanged()):
            return None
        self._catalog.catch_up(self._class)
        first = first_node(self._class, self._job)
        if first is None:
            self.blocked = True  # capacity only shrinks within a cycle
            return None
        if extra is not None:
            extra.vetoed = False
        judged = self._judge(first[1])  # usually the answer: then no walk
        if judged is not None and (not self._cpu_rule or judged[1] == 0.0):
            return first[1]
        best: tuple[float, str] | None = None  # (-score, name)
        for rank, name in self._walk():
            if best is not None:  # every node strands so far: can a later one do better?
                least = self._floor
                if least is not None:
                    floor = least(rank)
                    if best[0] < floor or (best[0] == floor and best[1] < name):
                        break
            judged = self._judge(name)
            if judged is None:
                continue
            if not self._cpu_rule:
                best = (0.0, name)  # the first that fits: no later one scores higher
                break
            entry, stranded = judged
            if best is None or entry < best:
                best = entry
            if stranded == 0.0:
                break
        if extra is None:
            self.blocked = best is None  # capacity, CPUs included, only shrinks within a cycle
            return None if best is None else best[1]
        self.blocked = best is None and not extra.vetoed
        return extra.found(None if best is None else best[1])

    @cached_property
    def _floor(self) -> Callable[[int], float] | None:
        """For a shared job under the CPU rule: the least ``-score`` of any node the walk
        meets at rank ``free_all`` or later, as a function of that rank; None when no
        useful bound exists (another job, or a class with a node not counting CPUs).

        Stranded capacity grows with free GPU memory and shrinks with free CPUs,
        so the bound is ``stranded_gpus`` of a node no node can beat: the
        largest GPUs of the class, the most CPUs free on any member at the start
        of the cycle (free CPUs only shrink) and the lowest CPUs-per-GPU ratio
        any member has for the job. The walk ranks by ``free_all``, so a later
        node has as much capacity left and strands at least as much. Where
        every member has the same CPUs, GPUs and GPU size the bound is the very
        computation of a member with the most CPUs free, so it is exact for
        such a node (a walk past many alike nodes stops at the second);
        otherwise it is lowered by a rounding margin. Worked out once per key and
        cycle, on first need.
        """
        job = self._job
        share = job.gpu_memory
        if not self._cpu_rule or share is None or job.gpus == 0 or not job.cpus:
            return None
        shapes: set[tuple[float, int, int]] = set()
        most_free = 0.0
        for part in self._class.parts:
            found = self._shapes.get(id(part))
            if found is None:
                found = self._shapes[id(part)] = node_shapes(self._state, part)
            if found is None:
                return None  # a member does not count CPUs: it strands nothing
            shapes |= found[0]
            most_free = max(most_free, found[1])
        if not shapes:
            return None
        taken = job.gpus * share
        ratio = min(min(cpus / gpus, job.cpus * size / taken) for cpus, gpus, size in shapes)
        largest = max(size for _, _, size in shapes)
        if ratio <= 0:
            return None
        exact = len(shapes) == 1

        def least(rank: int) -> float:
            stranded = stranded_gpus(job, ratio, 1, largest, rank, most_free)
            if not exact:
                stranded = max(0.0, stranded - 1e-9 * (1.0 + stranded))
            return -packed(left_after(job, 0, rank), stranded)

        return least

    def _judge(self, name: str) -> tuple[tuple[float, str], float] | None:
        """None when node ``name`` lacks the job's CPUs; else its ``(-score, name)`` under
        the CPU rule and the GPU capacity it would strand (both 0 without the rule)."""
        job, state = self._job, self._state
        cpus = state.views[name].cpus
        free = 0.0 if cpus is None else state.nodes.free_cpus_of(name)
        if not cpus_fit_on(job, cpus, free):
            return None
        if self._extra is not None and not self._extra.passes(name):
            return None
        if not self._cpu_rule:
            return (0.0, name), 0.0
        fit = state.fit(name)
        stranded = 0.0  # a node without CPU counts strands nothing (``Binpack.score``)
        if cpus is not None:
            largest = fit.sizes[0] if fit.sizes else 0
            stranded = stranded_gpus(job, cpus, fit.total, largest, fit.free_all, free)
        return (-packed(left_after(job, fit.idle_all, fit.free_all), stranded), name), stranded

    def _walk(self) -> Iterator[tuple[int, str]]:
        """Every node that can take the job's GPUs now, by ``(rank, name)``: lazily merged,
        so that a walk that stops early reads only the buckets' heads and what it passed."""
        return walk(self._class, self._job)

    def ranked(self) -> list[str]:
        raise AssertionError("gangs asking for CPUs take the generic path")

    def reasons(self) -> list[PendingReason]:
        """The generic path's reasons for a blocked key, in filter order, from the index:
        ``cpu_capacity`` rejects the available members of the class that lack the CPUs,
        ``gpu_capacity`` the others (``IndexedVerdicts._explain``). Memoized until the
        next reservation. With unknown filters, the generic path's own."""
        if self._extra is not None:
            return self._extra.reasons(self._indexed_reasons, self._feasible)
        return self._indexed_reasons()

    def _feasible(self) -> Iterator[str]:
        """``IndexedVerdicts._feasible``: the nodes with room for the job's GPUs and CPUs."""
        self._catalog.catch_up(self._class)
        job, state = self._job, self._state
        for _, name in self._walk():
            cpus = state.views[name].cpus
            if cpus_fit_on(job, cpus, 0.0 if cpus is None else state.nodes.free_cpus_of(name)):
                yield name

    def _indexed_reasons(self) -> list[PendingReason]:
        """``reasons`` as the built-in filters alone word them."""
        seen = self._catalog.catch_up(self._class)
        if self._reasons is None or self._reasons[0] != seen:
            explainer = IndexedVerdicts(self._job, self._catalog, self._class)
            self._reasons = (seen, explainer._explain(self._short()))
        return self._reasons[1]

    def _short(self) -> list[tuple[str, float, float]]:
        """``(name, CPUs, free CPUs)`` of the available members that lack the job's CPUs."""
        job = self._job
        views, free_cpus_of = self._state.views, self._state.nodes.free_cpus_of
        short: list[tuple[str, float, float]] = []
        for part in self._class.parts:
            for name in part.index.fits:
                cpus = views[name].cpus
                if cpus is not None:
                    free = free_cpus_of(name)
                    if not cpus_fit_on(job, cpus, free):
                        short.append((name, cpus, free))
        short.sort()
        return short


class PricedVerdicts(CpuVerdicts):
    """``KeyVerdicts`` for a one-GPU share placed by price (``policies/share_price/``).

    A node's place in the order is the least loss among its usable GPUs, then its
    free shareable memory, then its name. Each part's ``PricedShares`` keeps the
    members under each ``(memory_total, free)`` of their GPUs in a heap; this key
    keeps those keys that hold the share sorted by their loss (``_ordered``, adding
    only keys new to ``PricedShares.log``), so the best node without CPUs to weigh is
    the best head among the heaps of the least loss. For a job asking for CPUs (some
    node counts them) the heaps are walked in that order, merged, a heap joining once
    the walk reaches its loss, each node judged once (``SharePricing.judge``: CPUs
    free, then GPUs it would strand), and the walk stops at the first node that fits
    and strands nothing: every later one loses as much or more and has as much
    capacity left. ``reasons`` are ``CpuVerdicts``'s: prices change no verdict.
    """

    def __init__(
        self,
        job: JobRequest,
        catalog: Catalog,
        klass: ModelClassIndex,
        state: CycleState,
        pricing: SharePricing,
        walk: bool,
        extra: ExtraFilters | None = None,
    ) -> None:
        super().__init__(job, catalog, klass, state, True, extra=extra)
        self._pricing = pricing
        self._walks = walk
        self._keys: list[tuple[int, int, GpuKey]] = []  # (loss, part, key), ascending
        self._known: set[tuple[int, GpuKey]] = set()  # (part, key) in ``_keys``
        self._read: list[int] = [0] * len(klass.parts)  # how far each part's log was read

    def best(self) -> str | None:
        """The best feasible node, or None; once None, None for the rest of the cycle."""
        extra = self._extra
        if self.blocked or (extra is not None and extra.unchanged()):
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
                self.blocked = found is None  # capacity only shrinks within a cycle
                return None if found is None else str(found[1])
            if extra.passes(str(found[1])):
                return str(found[1])  # the best node, and the unknown filters admit it
        if extra is not None:
            extra.vetoed = False
        name = self._walk_priced(keys, by_part)
        if extra is None:
            self.blocked = name is None
            return name
        self.blocked = name is None and not extra.vetoed
        return extra.found(name)

    def _ordered(self, by_part: list[PricedShares]) -> list[tuple[int, int, GpuKey]]:
        """``_keys`` with the keys each part has made since the last call that hold the share
        (a key whose heap is gone stays: readers skip it)."""
        share = self._job.gpu_memory
        assert share is not None
        keys, known, loss = self._keys, self._known, self._pricing.loss
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
        """The best node that has the job's CPUs, walking the heaps in ``keys``' order
        merged, each heap in order without popping it (a heap's position ``i`` comes
        before ``2i + 1`` and ``2i + 2``), untrue entries skipped (class doc)."""
        job, state, pricing, extra = self._job, self._state, self._pricing, self._extra
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
            cpus = views[name].cpus
            free = 0.0 if cpus is None else free_cpus_of(name)
            if not cpus_fit_on(job, cpus, free):
                continue
            if extra is not None and not extra.passes(name):
                continue
            fit = next(part[name] for part in fits if name in part)
            judged = pricing.judge(
                job, fit.shares, state.fit(name).shares, free_all, None if cpus is None else free
            )
            if judged is None:
                continue
            entry = (-judged[0], name)
            if best is None or entry < best:
                best = entry
            if judged[1] == 0.0:
                break  # no node still to come scores higher (class doc)
        return None if best is None else best[1]
