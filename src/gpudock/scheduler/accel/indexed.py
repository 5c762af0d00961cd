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
first (``ExtraFilters``), except for a job they skip (``framework.skipped``).
Any other profile (another scorer, several, other weights) takes the generic
path (``equivalence.py``). Both must give the same Plan; the property tests
compare them on random clusters. What the fast path relies on:

* the node with the best score is the one with the fewest (binpack) or most
  (spread) idle GPUs, or free shareable memory for shared jobs, left after
  placement; the job's own size shifts every node's score equally (for a
  job asking for CPUs, binpack's CPU rule comes first: ``CpuVerdicts``);
* within a cycle capacity only shrinks and availability never changes, so a
  job key with no feasible node stays blocked until the cycle ends.

Here: ``IndexedCache`` (verdicts by key) and ``CapacityIndex`` (the
``Accelerator``). The verdicts are in ``verdicts.py`` (``IndexedVerdicts``) and
``cpu_verdicts.py`` (``CpuVerdicts``, ``PricedVerdicts``), the bucket walks in
``walks.py``, the unknown filters in ``extra.py``.
"""

from __future__ import annotations

from gpudock.scheduler.accel.boards import Boards
from gpudock.scheduler.accel.catalog import Catalog, CatalogMemo
from gpudock.scheduler.accel.cpu_verdicts import CpuVerdicts, PricedVerdicts
from gpudock.scheduler.accel.extra import (
    ExtraFilters,
    filters_for,
    indexable,
    last_filters,
    unknown_filters,
)
from gpudock.scheduler.accel.verdicts import IndexedVerdicts
from gpudock.scheduler.accel.victims import VictimSearch
from gpudock.scheduler.accel.walks import (
    Shapes,
    closest_shared,
    closest_whole,
    closest_whole_of,
    first_node,
    merged,
    node_shapes,
    walk,
    whole_buckets,
)
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.equivalence import EquivalenceCache, KeyVerdicts, VerdictCache
from gpudock.scheduler.framework import PlacementKey, Profile, placement_key
from gpudock.scheduler.policies.binpack import Binpack
from gpudock.scheduler.policies.share_price.mix import priced
from gpudock.scheduler.policies.spread import Spread
from gpudock.scheduler.preemption import VictimFinder, could_fit_if_freed
from gpudock.scheduler.running import RunningIndex
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import JobRequest

__all__ = [  # this module's own, and those of the modules it was split into
    "CapacityIndex",
    "CpuVerdicts",
    "ExtraFilters",
    "IndexedCache",
    "IndexedVerdicts",
    "PricedVerdicts",
    "Shapes",
    "closest_shared",
    "closest_whole",
    "closest_whole_of",
    "first_node",
    "indexable",
    "last_filters",
    "merged",
    "node_shapes",
    "unknown_filters",
    "walk",
    "whole_buckets",
]


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
        self._pricing = scorer.pricing(state) if isinstance(scorer, Binpack) else None
        self._shapes: dict[int, Shapes] = {}  # per part (by id): see ``CpuVerdicts._floor``
        self._unknown = unknown_filters(profile)  # filters run per candidate

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
            run = filters_for(self._unknown, job) if self._unknown else ()
            extra = ExtraFilters(job, self._state, self._profile, run) if run else None
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
