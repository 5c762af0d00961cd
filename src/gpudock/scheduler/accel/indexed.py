"""Steps 3a-b and 4 for the built-in profile, answered from the capacity index.

When a profile runs the built-in filters (``node_affinity`` → ``gpu_model``
→ ``node_health`` → ``cpu_capacity`` → ``gpu_capacity`` → ``gpu_topology``,
in this order, among any others) and one ``binpack`` or ``spread`` scorer of
weight 1 (``indexable``), the feasible nodes of a job and their order
follow from a few counters per node and *class* (the GPU models and node
affinity a job asks for: ``catalog.py``, over the indexes of ``index.py``).
``IndexedCache`` then answers each job in O(buckets) instead of running the
policies on every node (a class made of several parts: the best of their
best nodes), and words
pending reasons with the policies' own wording functions from the same
counters.

Multi-node gangs of whole GPUs are answered from the index too: their
feasible nodes, best first (``IndexedVerdicts.ranked``), are the whole-GPU
buckets with enough idle GPUs, by score then name.

A single-node job asking for CPUs on a cluster where some node counts them
(``CpuVerdicts``) walks the buckets of its class best first (by the score
without CPUs, then name), checks each node's free CPUs and, under
``binpack``'s CPU rule, scores it with the GPU capacity it would strand
(``policies/binpack.py``), until no node still to come can score higher:
usually a handful of nodes where CPUs are plentiful, every GPU-feasible node
where they are tight. Its pending reasons are worded from the index too:
``cpu_capacity``'s for the members short of CPUs, ``gpu_capacity``'s for the
others.

Three kinds of job go to the generic path (an ``EquivalenceCache`` kept
inside, over the same ``CycleState``): gangs of GPU shares, jobs that require
a GPU topology, and gangs asking for CPUs when some node counts CPUs. The
index would need per-node detail for them; they are rare, and the generic
path answers them exactly.

Filters the index does not know run on the candidates it returns, best
first (``ExtraFilters``). Any other profile (another scorer, several, other
weights) takes the generic path (``equivalence.py``). Both must give the same Plan; the property
tests compare them on random clusters. What the fast path relies on:

* the node with the best score is the one with the fewest (binpack) or most
  (spread) idle GPUs, or free shareable memory for shared jobs, left after
  placement; the job's own size shifts every node's score equally (for a
  job asking for CPUs, binpack's CPU rule comes first: ``CpuVerdicts``);
* within a cycle capacity only shrinks and availability never changes, so a
  job key with no feasible node stays blocked until the cycle ends.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from typing import TypeVar

from gpudock.core.job import PendingReason
from gpudock.scheduler.accel.boards import Boards
from gpudock.scheduler.accel.catalog import (
    Catalog,
    CatalogMemo,
    Group,
    ModelClassIndex,
    Part,
    shared_groups,
)
from gpudock.scheduler.accel.index import (
    ANY_MODEL,
    GpuKey,
    NodeFit,
    PricedEntry,
    PricedShares,
    WholeKey,
)
from gpudock.scheduler.accel.victims import VictimSearch
from gpudock.scheduler.capacity import CycleState, left_after
from gpudock.scheduler.equivalence import (
    EquivalenceCache,
    KeyVerdicts,
    VerdictCache,
    fallback_reason,
    no_nodes_reason,
)
from gpudock.scheduler.framework import FilterPolicy, PlacementKey, Profile, placement_key
from gpudock.scheduler.policies.binpack import Binpack, packed, stranded_gpus
from gpudock.scheduler.policies.cpu_capacity import CpuCapacity, cpus_fit_on, cpus_reason
from gpudock.scheduler.policies.gpu_capacity import Closest, GpuCapacity, capacity_reason
from gpudock.scheduler.policies.gpu_model import GpuModel, model_reason
from gpudock.scheduler.policies.gpu_topology import GpuTopology
from gpudock.scheduler.policies.node_affinity import NodeAffinity
from gpudock.scheduler.policies.node_health import NodeHealth, health_reason
from gpudock.scheduler.policies.spread import Spread
from gpudock.scheduler.preemption import VictimFinder, could_fit_if_freed
from gpudock.scheduler.pricing import SharePricing, priced
from gpudock.scheduler.running import RunningIndex
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import JobRequest

T = TypeVar("T")

_FILTERS = (NodeAffinity, GpuModel, NodeHealth, CpuCapacity, GpuCapacity, GpuTopology)


def indexable(profile: Profile) -> bool:
    """True when the capacity index answers ``profile`` exactly (see the module doc): the
    built-in filters, in their order, among any others, and one ``binpack`` or ``spread``
    scorer of weight 1."""
    known = tuple(type(f) for f in profile.filters if type(f) in _FILTERS)
    if known != _FILTERS or len(profile.scorers) != 1:
        return False
    scorer, weight = profile.scorers[0]
    return type(scorer) in (Binpack, Spread) and weight == 1.0


def unknown_filters(profile: Profile) -> tuple[FilterPolicy, ...]:
    """The filters of ``profile`` the index does not answer, in profile order."""
    return tuple(f for f in profile.filters if type(f) not in _FILTERS)


def last_filters(profile: Profile) -> bool:
    """True when every unknown filter of ``profile`` comes after every built-in one: then an
    unknown filter is run, in the generic path, only on nodes every built-in admits."""
    known = [type(f) in _FILTERS for f in profile.filters]
    return True not in known[known.index(False) :] if False in known else True


class ExtraFilters:
    """The unknown filters of a profile, run on the index's candidates for one key.

    ``passes(name)`` runs each unknown filter's reference ``filter`` on the
    node, in profile order, and keeps the verdict until the node is reserved
    on (policies are pure in ``placement_key`` and one node's state). A node
    any of them rejects drops out; ``vetoed`` records that one did, so a key
    found blocked is not taken as blocked for the rest of the cycle (an
    unknown filter need not be monotone in capacity). ``reasons`` are the
    generic path's (``KeyVerdicts``, built on first need, then caught up):
    every filter's own rejection status feeds step 4 exactly as there. One
    ``ExtraFilters`` serves every job with the key, and so does its answer to
    "do the unknown filters admit every node they see" (``_admits_all``).
    """

    def __init__(self, job: JobRequest, state: CycleState, profile: Profile) -> None:
        self._job = job
        self._state = state
        self._profile = profile
        self._filters = unknown_filters(profile)
        self._ok: dict[str, bool] = {}
        self._seen = len(state.changes)
        self._generic: KeyVerdicts | None = None
        self.vetoed = False
        self.none_at = -1  # ``len(state.changes)`` when a vetoed search last found nothing
        self._all = (-1, False)  # (``len(state.changes)``, ``_admits_all``)
        self._last = last_filters(profile)  # unknown filters see only what built-ins admit

    def passes(self, name: str) -> bool:
        """Whether every unknown filter admits node ``name`` now."""
        self._sync()
        verdict = self._ok.get(name)
        if verdict is None:
            job, node = self._job, self._state.nodes[name]
            verdict = self._ok[name] = all(f.filter(job, node).ok for f in self._filters)
        if not verdict:
            self.vetoed = True
        return verdict

    def _sync(self) -> None:
        """Forget the verdicts of the nodes reserved on since the last call."""
        changes = self._state.changes
        if self._seen != len(changes):
            ok = self._ok
            for changed in changes[self._seen :]:
                ok.pop(changed, None)
            self._seen = len(changes)

    def _admits_all(self, candidates: Callable[[], Iterable[str]]) -> bool:
        """Whether the unknown filters admit every node they are run on now (memoized until
        a reservation). When they come after every built-in filter (``last_filters``), they
        run only on the nodes the built-ins admit, a subset of ``candidates()`` (the
        index's feasible nodes: none, usually, for a blocked key); else on every node."""
        now = len(self._state.changes)
        if self._all[0] != now:
            self._sync()
            ok, nodes, job, filters = self._ok, self._state.nodes, self._job, self._filters
            admitted = True
            for name in candidates() if self._last else self._state.views:
                verdict = ok.get(name)
                if verdict is None:
                    node = nodes[name]
                    verdict = ok[name] = all(f.filter(job, node).ok for f in filters)
                if not verdict:
                    admitted = False
                    break
            self._all = (now, admitted)
        return self._all[1]

    def unchanged(self) -> bool:
        """True when a search that found nothing saw the state as it is now."""
        return self.none_at == len(self._state.changes)

    def found(self, name: str | None) -> str | None:
        """Record a search's answer (``name``); None when it found nothing."""
        self.none_at = len(self._state.changes) if name is None else -1
        return name

    def reasons(
        self,
        indexed: Callable[[], list[PendingReason]],
        candidates: Callable[[], Iterable[str]],
    ) -> list[PendingReason]:
        """The generic path's reasons for this key, on the current state: ``indexed`` (the
        index's own, worded from the built-in filters alone) when the unknown filters admit
        every node they are run on, for then each node's first failing filter is a built-in
        one; else a ``KeyVerdicts``'s. ``candidates``: every node the built-in filters admit
        now, or more (``_admits_all``). Only the nodes reserved on since are re-checked."""
        if self._admits_all(candidates):
            return indexed()
        if self._generic is None:
            self._generic = KeyVerdicts(self._job, self._state, self._profile)
        else:
            self._generic.catch_up()
        return self._generic.reasons()


class IndexedCache:
    """``EquivalenceCache`` for an ``indexable`` profile: verdicts by placement key.

    Like ``EquivalenceCache`` it catches up with ``CycleState.changes``
    before answering, re-summarising only the nodes reserved on. Verdicts
    point at the ``Catalog``, never back at this cache, so a finished cycle
    is freed by reference counting alone (no garbage-collector work).
    """

    def __init__(
        self, state: CycleState, profile: Profile, memo: CatalogMemo | None = None
    ) -> None:
        assert indexable(profile), "IndexedCache needs the built-in filters and one scorer"
        sign = -1 if type(profile.scorers[0][0]) is Spread else 1
        self._catalog = Catalog(state, sign, memo)
        self._by_key: dict[PlacementKey, IndexedVerdicts | CpuVerdicts | PricedVerdicts] = {}
        self._state = state
        self._profile = profile
        self._generic: EquivalenceCache | None = None
        # some node counts CPUs (a list, not a generator resumed per node)
        cpus = [v.cpus for v in state.views.values()]
        self._cpu_nodes = cpus.count(None) != len(cpus)
        scorer = profile.scorers[0][0]
        self._cpu_rule = isinstance(scorer, Binpack) and scorer.cpu_aware
        self._pricing = scorer.pricing if isinstance(scorer, Binpack) else None
        self._shapes: dict[int, Shapes] = {}  # per part (by id): see ``CpuVerdicts._floor``
        self._unknown = bool(unknown_filters(profile))  # filters run per candidate

    def generic(self, job: JobRequest) -> bool:
        """True for the jobs the index leaves to the generic path (see the module doc)."""
        return (
            (job.nodes > 1 and (job.shared or job.gpus == 0))
            or (job.topology is not None and job.gpus >= 2)
            or (bool(job.cpus) and self._cpu_nodes and job.nodes > 1)
        )

    def _generic_cache(self) -> EquivalenceCache:
        """The inner ``EquivalenceCache`` (see the module doc), made on first use."""
        if self._generic is None:
            self._generic = EquivalenceCache(self._state, self._profile)
        return self._generic

    def verdicts(
        self, job: JobRequest
    ) -> IndexedVerdicts | CpuVerdicts | PricedVerdicts | KeyVerdicts:
        """Current verdicts for ``job``'s key (caught up with every reservation so far).

        A key already blocked stays blocked, so it is answered before catching up.
        """
        if (  # ``generic``, inlined: this runs for every job
            (job.nodes > 1 and (job.gpu_memory is not None or job.gpus == 0 or job.cpus))
            or (job.topology is not None and job.gpus >= 2)
        ):
            return self._generic_cache().verdicts(job)
        key = placement_key(job)
        verdicts = self._by_key.get(key)
        if verdicts is not None and verdicts.blocked:
            return verdicts
        if verdicts is None:
            catalog = self._catalog
            extra = ExtraFilters(job, self._state, self._profile) if self._unknown else None
            if self._pricing is not None and priced(job):
                verdicts = PricedVerdicts(
                    job,
                    catalog,
                    catalog.model_class(job),
                    self._state,
                    self._pricing,
                    bool(job.cpus) and self._cpu_nodes,
                    extra,
                )
            elif job.cpus and self._cpu_nodes:
                verdicts = CpuVerdicts(
                    job,
                    catalog,
                    catalog.model_class(job),
                    self._state,
                    self._cpu_rule,
                    self._shapes,
                    extra,
                )
            else:
                verdicts = IndexedVerdicts(job, catalog, catalog.model_class(job), extra)
            self._by_key[key] = verdicts
        return verdicts


class IndexedVerdicts:
    """``KeyVerdicts`` for one placement key, answered from its model class's index."""

    def __init__(
        self,
        job: JobRequest,
        catalog: Catalog,
        klass: ModelClassIndex,
        extra: ExtraFilters | None = None,
    ) -> None:
        self._job = job  # any job with this key
        self._catalog = catalog
        self._class = klass
        self._extra = extra
        self.blocked = False
        self._reasons: tuple[int, list[PendingReason]] | None = None  # (changes seen, reasons)

    def best(self) -> str | None:
        """The best feasible node, or None; once None, None for the rest of the cycle."""
        if self.blocked:
            return None
        self._catalog.catch_up(self._class)
        best = first_node(self._class, self._job)
        extra = self._extra
        if best is None or extra is None:
            self.blocked = best is None  # capacity only shrinks within a cycle
            return None if best is None else best[1]
        if extra.passes(best[1]):
            return best[1]
        if extra.unchanged():
            return None
        admitted = (name for _, name in walk(self._class, self._job) if extra.passes(name))
        return extra.found(next(admitted, None))

    def ranked(self) -> list[str]:
        """Every feasible node for a whole-GPU request, best first (score, then name).

        ``KeyVerdicts.ranked`` from the whole-GPU buckets: the nodes with at
        least ``gpus`` idle GPUs of the class, by ``sign * idle_all``.
        Multi-node gangs read it; O(feasible nodes log feasible nodes).
        """
        self._catalog.catch_up(self._class)
        gpus = self._job.gpus
        assert not self._job.shared, "shared gangs take the generic path"
        ranked = [
            (rank, name)
            for part in self._class.parts
            for rank, key in part.index.ranked_whole()
            if key[1] >= gpus
            for name in part.index.whole()[key]
        ]
        ranked.sort()
        extra = self._extra
        if extra is not None:
            return [name for _, name in ranked if extra.passes(name)]
        return [name for _, name in ranked]

    def reasons(self) -> list[PendingReason]:
        """The generic path's reasons for a blocked key, in filter order.

        Memoized until the next reservation (only step 4 asks, after the last).
        With unknown filters, the generic path's own (``ExtraFilters.reasons``).
        """
        if self._extra is not None:
            return self._extra.reasons(self._indexed_reasons, self._feasible)
        return self._indexed_reasons()

    def _feasible(self) -> Iterator[str]:
        """Every node the built-in filters admit now (``ExtraFilters.reasons``): for a job
        asking for CPUs, every node with room for its GPUs (the ones ``CpuVerdicts`` walks)."""
        self._catalog.catch_up(self._class)
        return (name for _, name in walk(self._class, self._job))

    def _indexed_reasons(self) -> list[PendingReason]:
        """``reasons`` as the built-in filters alone word them."""
        seen = self._catalog.catch_up(self._class)
        if self._reasons is None or self._reasons[0] != seen:
            self._reasons = (seen, self._explain())
        return self._reasons[1]

    def _explain(self, short: Sequence[tuple[str, float, float]] = ()) -> list[PendingReason]:
        """The reasons; ``short``: ``(name, CPUs, free CPUs)`` of the available members that
        lack the job's CPUs (``CpuVerdicts``), which ``cpu_capacity`` rejects before
        ``gpu_capacity`` sees them."""
        job, klass, total = self._job, self._class, self._catalog.node_count
        if total == 0:
            return [no_nodes_reason()]
        fits = klass.has_members()
        if not fits and not klass.down:
            if klass.excluded == total:
                return [self._catalog.affinity_reason(job)]  # node_affinity rules out all
            if klass.members is not ANY_MODEL and klass.excluded == 0:
                return [model_reason(job, self._catalog.gpu_names)]  # every node lacks the model
            return [self._catalog.constraints_reason(job)]  # affinity and model, together
        reasons: list[PendingReason] = []
        if klass.down:
            reasons.append(health_reason(klass.down))
        rest: list[tuple[str, NodeFit]] | None = None  # None: every available member
        if short:
            cpus = cpus_reason(job, short, total)
            if cpus is not None:
                reasons.append(cpus)
            lacking = {name for name, _, _ in short}
            rest = [
                (name, fit)
                for part in klass.parts
                for name, fit in part.index.fits.items()
                if name not in lacking
            ]
        if job.gpus > 0 and (fits if rest is None else rest):  # they all fail gpu_capacity
            if job.shared:
                assert job.gpu_memory is not None
                groups = klass.groups() if rest is None else shared_groups(rest)
                closest = closest_shared(groups, job.gpus, job.gpu_memory)
            elif rest is None:
                closest = closest_whole(klass.parts, job.gpus)
            else:
                closest = closest_whole_of(whole_buckets(rest), job.gpus)
            reasons.append(capacity_reason(job, closest))
        return reasons or [fallback_reason(total)]


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
        """``IndexedVerdicts._feasible``: the nodes with room for the job's GPUs (more than
        the built-in filters admit: ``cpu_capacity`` may reject some; a superset is safe)."""
        self._catalog.catch_up(self._class)
        return (name for _, name in self._walk())

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
    """``KeyVerdicts`` for a one-GPU share placed by price (``scheduler/pricing.py``).

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


class CapacityIndex:
    """The default ``Accelerator`` (``scheduler/acceleration.py``): an ``IndexedCache`` for
    an ``indexable`` profile (unknown filters included, run on the index's candidates),
    else the generic path (an unknown scorer, several scorers, other weights)."""

    name = "capacity_index"

    def verdicts(
        self, state: CycleState, profile: Profile, session: SchedulerSession
    ) -> VerdictCache:
        if indexable(profile):
            return IndexedCache(state, profile, session.catalog)
        return EquivalenceCache(state, profile)

    def victims(
        self, state: CycleState, running: RunningIndex, session: SchedulerSession
    ) -> VictimFinder:
        """``Boards`` over a ``VictimSearch`` (``victims.py``): ``choose_victims``' answers
        without trying every node for every job."""
        views = state.views
        search = VictimSearch(
            state, running, lambda job, name: could_fit_if_freed(job, views[name]), session.victims
        )
        return Boards(search)
