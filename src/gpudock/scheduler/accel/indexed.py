"""Steps 3a-b and 4 answered from the capacity index, and the ``Accelerator`` it makes.

The index reads what the profile's policies declare (``declarations.py``,
``declared.py``) and nothing else. For each placement key: its class (``catalog.py``),
the nodes every ``NodeOnly`` filter it needs admits, indexed by free capacity
(``index.py``: the ``GPUS`` rule some filter declares with ``NeedsGpus``); its order,
from the scorers' declarations (``declared.walk_order``), answered in O(buckets) when
exact with no per-node rule (``IndexedVerdicts``), by a walk when scored along it or
when a ``NeedsHost`` rule applies (``WalkedVerdicts``), by the declared loss of a GPU
(``PricedVerdicts``), or by the scorers themselves on the candidates when they declare
nothing usable (``RankedVerdicts``); its undeclared filters, run on the candidates
(``ExtraFilters``). Gangs of shares, gangs with a per-node rule and jobs a
``NeedsGroup`` filter checks go to the generic path (an ``EquivalenceCache`` over the
same ``CycleState``): they are rare and need per-node detail.

What the walks rely on (declared by the policies, property-tested against the generic
path): a ``Walked`` order without a score is strictly monotone in the capacity the job
would leave a node; node-only verdicts never change within a cycle, and capacity only
shrinks until a backfill gives a hold back (``CycleState.released``), so a key with no
feasible node stays blocked until then.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter

from gpudock.scheduler.accel.boards import Boards
from gpudock.scheduler.accel.catalog import Catalog, CatalogMemo
from gpudock.scheduler.accel.declared import FilterPlan, JobFilters, usable, walk_order
from gpudock.scheduler.accel.extra import ExtraFilters
from gpudock.scheduler.accel.node_only import NodeOnlyMemo, NodeOnlyVerdicts
from gpudock.scheduler.accel.post_filter import DeclaredPostFilter, EmptyMemo
from gpudock.scheduler.accel.ranked import RankedVerdicts
from gpudock.scheduler.accel.verdicts import IndexedVerdicts, KeyContext
from gpudock.scheduler.accel.victims import VictimSearch
from gpudock.scheduler.accel.walked import PricedVerdicts, WalkedVerdicts
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.declarations import Priced, Shapes, Walked
from gpudock.scheduler.equivalence import EquivalenceCache, KeyVerdicts, VerdictCache
from gpudock.scheduler.framework import PlacementKey, Profile, placement_key
from gpudock.scheduler.post_filter import FiltersAfter, PostFilter
from gpudock.scheduler.preemption import VictimFinder
from gpudock.scheduler.running import RunningIndex
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import JobRequest

__all__ = ["CapacityIndex", "IndexMemo", "IndexedCache"]

IndexedKind = IndexedVerdicts | WalkedVerdicts | PricedVerdicts | RankedVerdicts
Verdicts = IndexedKind | KeyVerdicts


@dataclass(slots=True)
class IndexMemo:
    """What the capacity index keeps for its caller's next cycle, in the session's
    ``accelerator`` slot: the products' indexes per scorer sign, the node-only
    verdicts and the post-filter's answers for empty nodes."""

    catalogs: dict[int, CatalogMemo] = field(default_factory=dict)
    node_only: NodeOnlyMemo = field(default_factory=NodeOnlyMemo)
    empty: EmptyMemo = field(default_factory=EmptyMemo)


class IndexedCache:
    """``EquivalenceCache`` from the capacity index: verdicts by placement key, caught up
    with ``CycleState.changes`` before answering. Verdicts point at the ``Catalog``, never
    back at this cache: a finished cycle is freed by reference counting alone."""

    def __init__(
        self,
        state: CycleState,
        profile: Profile,
        verdicts: NodeOnlyVerdicts,
        memo: IndexMemo | None = None,
        plan: FilterPlan | None = None,
    ) -> None:
        self._state = state
        self._profile = profile
        self._memo = memo if memo is not None else IndexMemo()
        self._plan = plan if plan is not None else FilterPlan(profile)
        self._verdicts = verdicts
        self._base = tuple((i, d) for i, _, d in self._plan.all.node_only if d.key is None)
        self._catalogs: dict[int, Catalog] = {}
        self._by_key: dict[PlacementKey, IndexedKind] = {}
        self._generic_keys: set[PlacementKey] = set()  # keys the generic path answers
        self._generic: EquivalenceCache | None = None
        self._shapes: dict[int, Shapes | None] = {}  # per part (by id): ``WalkedVerdicts``
        self._cpu_nodes = _some_count(state, "cpus")
        self._memory_nodes = _some_count(state, "host_memory")

    def _catalog(self, sign: int) -> Catalog:
        """The cycle's catalog for a walk of ``sign`` (1: fewest left first), made on first use."""
        found = self._catalogs.get(sign)
        if found is None:
            memo = self._memo.catalogs.setdefault(sign, CatalogMemo())
            found = Catalog(self._state, sign, self._verdicts, self._base, memo)
            self._catalogs[sign] = found
        return found

    def _generic_cache(self) -> EquivalenceCache:
        """The inner ``EquivalenceCache`` (see the module doc), made on first use."""
        if self._generic is None:
            self._generic = EquivalenceCache(self._state, self._profile)
        return self._generic

    def verdicts(self, job: JobRequest) -> Verdicts:
        """Current verdicts for ``job``'s key (caught up with every reservation so far: the
        index's when asked, the generic path's here)."""
        key = placement_key(job)
        verdicts = self._by_key.get(key)
        if verdicts is None:
            if key in self._generic_keys:
                return self._generic_cache().verdicts(job)  # caught up there
            verdicts = self._make(job)
            if verdicts is None:
                self._generic_keys.add(key)
                return self._generic_cache().verdicts(job)
            self._by_key[key] = verdicts
        return verdicts

    def _make(self, job: JobRequest) -> IndexedKind | None:
        """The verdicts of a key seen for the first time this cycle; None for a key the
        generic path answers (module doc)."""
        filters = self._plan.for_job(job)
        cpus = filters.cpus and self._cpu_nodes
        memory = filters.memory and self._memory_nodes
        gang = job.nodes > 1
        if filters.group or (
            gang and (job.gpu_memory is not None or not job.gpus or cpus or memory)
        ):
            return None
        order = walk_order(self._profile, job, self._state)
        sign = -1 if isinstance(order, Walked) and not order.fewest else 1
        catalog = self._catalog(sign)
        extra = self._extra(job, filters)
        key = KeyContext(
            job,
            filters,
            catalog,
            catalog.model_class(job, filters),
            self._state,
            self._verdicts,
            self._profile,
            cpus,
            memory,
            extra,
        )
        if order is None:
            return RankedVerdicts(key)
        if isinstance(order, Priced):
            if gang:
                return RankedVerdicts(key)
            return PricedVerdicts(key, order)
        if cpus or memory or order.score is not None:
            if gang:
                return RankedVerdicts(key)
            return WalkedVerdicts(key, order, self._shapes)
        return IndexedVerdicts(key)

    def _extra(self, job: JobRequest, filters: JobFilters) -> ExtraFilters | None:
        """The undeclared filters ``job`` needs, run on the candidates; None when none."""
        if not filters.extras:
            return None
        run = tuple(f for _, f in filters.extras)
        return ExtraFilters(job, self._state, run, filters.extras_last())


def _some_count(state: CycleState, resource: str) -> bool:
    """Some node counts ``resource`` (its view's field is not None); a pass in C."""
    values = list(map(attrgetter(resource), state.views.values()))
    return values.count(None) < len(values)


class CapacityIndex:
    """The default ``Accelerator`` (``scheduler/acceleration.py``): the capacity index, for
    any profile with a filter declaring ``NeedsGpus``; else the generic path. One serves
    one cycle: its verdict cache and ``PostFilter`` share the cycle's node-only verdicts
    and ``FilterPlan``."""

    name = "capacity_index"

    def __init__(self) -> None:
        self._cycle: tuple[CycleState, Profile, NodeOnlyVerdicts, FilterPlan] | None = None

    def verdicts(
        self, state: CycleState, profile: Profile, session: SchedulerSession
    ) -> VerdictCache:
        if not usable(profile):
            return EquivalenceCache(state, profile)
        memo = session.accelerator.get(IndexMemo)
        verdicts, plan = self._shared(state, profile, memo)
        return IndexedCache(state, profile, verdicts, memo, plan)

    def post_filter(
        self, state: CycleState, profile: Profile, session: SchedulerSession
    ) -> PostFilter:
        """``accel/post_filter.py``: ``FiltersAfter``'s answers from the declarations."""
        if not usable(profile):
            return FiltersAfter(state, profile)
        memo = session.accelerator.get(IndexMemo)
        verdicts, plan = self._shared(state, profile, memo)
        return DeclaredPostFilter(state, plan, verdicts, memo.empty)

    def _shared(
        self, state: CycleState, profile: Profile, memo: IndexMemo
    ) -> tuple[NodeOnlyVerdicts, FilterPlan]:
        """The cycle's node-only verdicts and filter plan, made on first use."""
        cycle = self._cycle
        if cycle is None or cycle[0] is not state or cycle[1] is not profile:
            verdicts = NodeOnlyVerdicts(state, memo.node_only)
            cycle = self._cycle = (state, profile, verdicts, FilterPlan(profile))
        return cycle[2], cycle[3]

    def victims(
        self, state: CycleState, running: RunningIndex, feasibility: PostFilter
    ) -> VictimFinder:
        """``Boards`` over a ``VictimSearch`` (``victims.py``): ``choose_victims``' answers
        without trying every node for every job."""
        return Boards(VictimSearch(state, running, feasibility))
