"""Filters that declare nothing, run on the candidates the capacity index returns.

The index answers the filters that declare how (``declarations.py``). Every other
filter of the profile is *undeclared*: ``ExtraFilters`` runs its own ``filter`` on the
nodes the index proposes, best first. Step 4 words what they reject among the nodes the
declared filters admit, as the generic path does, when they come after those filters
(as a filter added to a profile does); the generic path's reasons (``KeyVerdicts``)
otherwise. An undeclared filter that ``skips`` a job is left out for it
(``declared.FilterPlan.for_job``). So a new filter is correct and fast with nothing
else touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.framework import FilterPolicy, Rejection, Status, StatusCode
from gpudock.scheduler.snapshot import JobRequest

Worded = tuple[list[PendingReason], list[tuple[str, Status]], frozenset[str]]
"""The undeclared filters' reasons, the nodes they reject with each one's status, and the
nodes the declared filters admit (which no declared filter's wording may count)."""


class ExtraFilters:
    """The undeclared filters of a profile that one key needs, run on the index's candidates
    for that key.

    ``passes(name)`` runs each undeclared filter's ``filter`` on the node, in
    profile order, and keeps the first rejection (the filter's position and
    status; None when all admit it) until the node is reserved on (policies
    are pure in ``placement_key`` and one node's state); ``worded`` reads the
    same. A node any of them rejects drops out; ``vetoed`` records that one
    did, so a key found blocked is not taken as blocked for the rest of the
    cycle (an undeclared filter need not be monotone in capacity); ``found``
    records when such a search found nothing, so that the next one looks only
    at the nodes reserved on since (``ClassVerdicts.none_still``). One serves
    every job with the key.
    """

    def __init__(
        self,
        job: JobRequest,
        state: CycleState,
        filters: tuple[FilterPolicy, ...],
        last: bool,
    ) -> None:
        self._job = job
        self._state = state
        self._filters = filters
        self._first: dict[str, tuple[int, Status] | None] = {}  # each node's first rejection
        self._seen = len(state.changes)
        self.vetoed = False
        self.none_at = -1  # ``len(state.changes)`` when a vetoed search last found nothing
        self.none_released = 0  # ``state.released`` then
        self.last = last  # they come after every declared filter: they see what those admit
        self._worded: tuple[int, Worded] | None = None  # (changes seen, ``worded``)

    def passes(self, name: str) -> bool:
        """Whether every undeclared filter admits node ``name`` now."""
        if self._rejection(name) is None:
            return True
        self.vetoed = True
        return False

    def _rejection(self, name: str) -> tuple[int, Status] | None:
        """The first undeclared filter (its position) that rejects node ``name`` now, with its
        status; None when all admit it. Kept until the node is reserved on."""
        changes = self._state.changes
        if self._seen != len(changes):  # forget the nodes reserved on since
            for changed in changes[self._seen :]:
                self._first.pop(changed, None)
            self._seen = len(changes)
        if name in self._first:
            return self._first[name]
        job, node = self._job, self._state.nodes[name]
        found: tuple[int, Status] | None = None
        for i, policy in enumerate(self._filters):
            status = policy.filter(job, node)
            if not status.ok:
                found = (i, status)
                break
        self._first[name] = found
        return found

    def found(self, name: str | None) -> str | None:
        """Record a search's answer (``name``); None when it found nothing."""
        self.none_at = len(self._state.changes) if name is None else -1
        self.none_released = self._state.released
        return name

    def worded_now(self, feasible: Callable[[], Iterable[str]]) -> Worded:
        """``worded`` of ``feasible()`` (the nodes every declared filter admits now),
        memoized until a reservation."""
        seen = len(self._state.changes)
        if self._worded is None or self._worded[0] != seen:
            self._worded = (seen, self.worded(feasible()))
        return self._worded[1]

    def worded(self, feasible: Iterable[str]) -> Worded:
        """What the undeclared filters say of the nodes the declared ones admit
        (``feasible``), as the generic path words it: each node's first rejecting filter,
        in profile order; each filter's errors, then its ``explain``."""
        job, nodes = self._job, self._state.nodes
        by_filter: list[list[Rejection]] = [[] for _ in self._filters]
        rejected: list[tuple[str, Status]] = []
        admitted = frozenset(feasible)
        for name in sorted(admitted):
            first = self._rejection(name)
            if first is not None:
                by_filter[first[0]].append(Rejection(first[1], nodes[name]))
                rejected.append((name, first[1]))
        total = len(self._state.views)
        reasons: list[PendingReason] = []
        for policy, rejections in zip(self._filters, by_filter, strict=True):
            if not rejections:
                continue
            reasons.extend(
                PendingReason(r.status.layer or policy.layer, r.status.reason)
                for r in rejections
                if r.status.code is StatusCode.ERROR
            )
            found = policy.explain(job, rejections, total)
            if found is not None:
                reasons.append(found)
        return reasons, rejected, admitted
