"""Filters the capacity index does not know, run on the candidates it returns.

``indexable`` says whether the index answers a profile at all: the built-in
filters, in their order, among any others, and one ``binpack`` or ``spread``
scorer of weight 1. Every other filter of such a profile is *unknown*:
``ExtraFilters`` runs its own ``filter`` on the nodes the index proposes, best
first, and falls back to the generic path's wording (``KeyVerdicts``) in step 4
when an unknown filter is the first to reject a node. An unknown filter that
``skips`` a job (``framework.skipped``: it admits every node for it) is left
out for that job; a job that all of them skip takes the index's plain path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.equivalence import (
    KeyVerdicts,
)
from gpudock.scheduler.framework import FilterPolicy, Profile, skipped
from gpudock.scheduler.policies.binpack import Binpack
from gpudock.scheduler.policies.cpu_capacity import CpuCapacity
from gpudock.scheduler.policies.gpu_capacity import GpuCapacity
from gpudock.scheduler.policies.gpu_model import GpuModel
from gpudock.scheduler.policies.gpu_topology import GpuTopology
from gpudock.scheduler.policies.node_affinity import NodeAffinity
from gpudock.scheduler.policies.node_health import NodeHealth
from gpudock.scheduler.policies.spread import Spread
from gpudock.scheduler.snapshot import JobRequest

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


def filters_for(unknown: tuple[FilterPolicy, ...], job: JobRequest) -> tuple[FilterPolicy, ...]:
    """The ``unknown`` filters that ``job`` needs run: those that do not skip it."""
    return tuple(f for f in unknown if not skipped(f, job))


def last_filters(profile: Profile) -> bool:
    """True when every unknown filter of ``profile`` comes after every built-in one: then an
    unknown filter is run, in the generic path, only on nodes every built-in admits."""
    known = [type(f) in _FILTERS for f in profile.filters]
    return True not in known[known.index(False) :] if False in known else True


class ExtraFilters:
    """The unknown filters of a profile that one key needs (``filters_for``), run on the
    index's candidates for that key.

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

    def __init__(
        self,
        job: JobRequest,
        state: CycleState,
        profile: Profile,
        filters: tuple[FilterPolicy, ...],
    ) -> None:
        self._job = job
        self._state = state
        self._profile = profile
        self._filters = filters
        self._ok: dict[str, bool] = {}
        self._seen = len(state.changes)
        self._generic: KeyVerdicts | None = None
        self.vetoed = False
        self.none_at = -1  # ``len(state.changes)`` when a vetoed search last found nothing
        self._all = (-1, False)  # (``len(state.changes)``, ``_admits_all``)
        self._last = last_filters(profile)  # unknown filters see only what built-ins admit
        self._rejected: set[str] = set()  # the nodes whose verdict in ``_ok`` is False
        self._scanned = False  # every node has had a verdict (``_admits_all``, not last)
        self._since: set[str] = set()  # once scanned: the nodes changed since

    def passes(self, name: str) -> bool:
        """Whether every unknown filter admits node ``name`` now."""
        self._sync()
        verdict = self._verdict(name)
        if not verdict:
            self.vetoed = True
        return verdict

    def _verdict(self, name: str) -> bool:
        """``passes(name)`` without syncing or recording a veto."""
        verdict = self._ok.get(name)
        if verdict is None:
            job, node = self._job, self._state.nodes[name]
            verdict = self._ok[name] = all(f.filter(job, node).ok for f in self._filters)
            if not verdict:
                self._rejected.add(name)
        return verdict

    def _sync(self) -> None:
        """Forget the verdicts of the nodes reserved on since the last call."""
        changes = self._state.changes
        if self._seen != len(changes):
            ok, rejected = self._ok, self._rejected
            fresh = changes[self._seen :]
            for changed in fresh:
                ok.pop(changed, None)
                rejected.discard(changed)
            if self._scanned:
                self._since.update(fresh)
            self._seen = len(changes)

    def _admits_all(self) -> bool:
        """Whether the unknown filters admit every node now (memoized until a reservation):
        every node once, then only those reserved on since (the rejected ones are counted)."""
        now = len(self._state.changes)
        if self._all[0] != now:
            self._sync()
            verdict = self._verdict
            for name in self._since if self._scanned else self._state.views:
                verdict(name)
            self._scanned = True
            self._since.clear()
            self._all = (now, not self._rejected)
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
        feasible: Callable[[], Iterable[str]],
    ) -> list[PendingReason]:
        """The generic path's reasons for this key, on the current state.

        ``feasible``: the nodes every built-in filter admits now. When there is
        none, and the unknown filters come last (so the generic path runs them
        on no node) or admit every node, each node's first failing filter is a
        built-in one: ``indexed`` (the index's own wording) is the answer. Else
        a ``KeyVerdicts``'s: an unknown filter rejects some node, or a node
        passes every filter now (an unknown filter, not monotone in capacity,
        vetoed it earlier in the cycle). Only the nodes reserved on since are
        re-checked.
        """
        if next(iter(feasible()), None) is None and (self._last or self._admits_all()):
            return indexed()
        if self._generic is None:
            self._generic = KeyVerdicts(self._job, self._state, self._profile)
        else:
            self._generic.catch_up()
        return self._generic.reasons()
