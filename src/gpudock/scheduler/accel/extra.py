"""Filters that declare nothing, run on the candidates the capacity index returns.

The index answers the filters that declare how (``declarations.py``). Every other
filter of the profile is *undeclared*: ``ExtraFilters`` runs its own ``filter`` on the
nodes the index proposes, best first, and falls back to the generic path's wording
(``KeyVerdicts``) in step 4 when an undeclared filter is the first to reject a node. An
undeclared filter that ``skips`` a job (``framework.skipped``: it admits every node for
it) is left out for that job (``declared.FilterPlan.for_job``); a job that all of them
skip takes the index's plain path. So a new filter is correct and fast with nothing
else touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.equivalence import KeyVerdicts
from gpudock.scheduler.framework import FilterPolicy, Profile, Rejection, Status, StatusCode
from gpudock.scheduler.snapshot import JobRequest

Worded = tuple[list[PendingReason], list[tuple[str, Status]], frozenset[str]]
"""The undeclared filters' reasons, the nodes they reject with each one's status, and the
nodes the declared filters admit (which no declared filter's wording may count)."""


class ExtraFilters:
    """The undeclared filters of a profile that one key needs, run on the index's candidates
    for that key.

    ``passes(name)`` runs each undeclared filter's reference ``filter`` on the
    node, in profile order, and keeps the verdict until the node is reserved
    on (policies are pure in ``placement_key`` and one node's state). A node
    any of them rejects drops out; ``vetoed`` records that one did, so a key
    found blocked is not taken as blocked for the rest of the cycle (an
    undeclared filter need not be monotone in capacity). ``reasons`` are the
    generic path's (``KeyVerdicts``, built on first need, then caught up):
    every filter's own rejection status feeds step 4 exactly as there. One
    ``ExtraFilters`` serves every job with the key, and so does its answer to
    "do the undeclared filters admit every node they see" (``_admits_all``).
    """

    def __init__(
        self,
        job: JobRequest,
        state: CycleState,
        profile: Profile,
        filters: tuple[FilterPolicy, ...],
        last: bool,
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
        self._last = last  # they come after every declared filter: they see what those admit
        self._rejected: set[str] = set()  # the nodes whose verdict in ``_ok`` is False
        self._scanned = False  # every node has had a verdict (``_admits_all``, not last)
        self._since: set[str] = set()  # once scanned: the nodes changed since
        self._worded: tuple[int, Worded] | None = None  # (changes seen, ``worded``)

    def passes(self, name: str) -> bool:
        """Whether every undeclared filter admits node ``name`` now."""
        if self._seen != len(self._state.changes):
            self._sync()
        verdict = self._ok.get(name)
        if verdict is None:
            verdict = self._verdict(name)
        if not verdict:
            self.vetoed = True
        return verdict

    def _verdict(self, name: str) -> bool:
        """``passes(name)`` without syncing or recording a veto."""
        verdict = self._ok.get(name)
        if verdict is None:
            job, node = self._job, self._state.nodes[name]
            verdict = True
            for policy in self._filters:
                if not policy.filter(job, node).ok:
                    verdict = False
                    self._rejected.add(name)
                    break
            self._ok[name] = verdict
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
        """Whether the undeclared filters admit every node now (memoized until a reservation):
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
        indexed: Callable[[Worded | None], list[PendingReason]],
        feasible: Callable[[], Iterable[str]],
    ) -> list[PendingReason]:
        """The generic path's reasons for this key, on the current state.

        ``feasible``: the nodes every declared filter admits now. When the
        undeclared filters come last, the generic path runs them on those nodes
        only: ``indexed`` (the index's own wording of the declared filters' rejections)
        with ``worded``, theirs, is the answer. When they do not, but there is no
        such node and they admit every node, each node's first failing filter is a
        declared one: ``indexed`` alone. Else a ``KeyVerdicts``'s. Only the nodes
        reserved on since are re-checked.
        """
        if self._last:
            seen = len(self._state.changes)
            if self._worded is None or self._worded[0] != seen:
                self._worded = (seen, self.worded(feasible()))
            return indexed(self._worded[1])
        if next(iter(feasible()), None) is None and self._admits_all():
            return indexed(None)
        if self._generic is None:
            self._generic = KeyVerdicts(self._job, self._state, self._profile)
        else:
            self._generic.catch_up()
        return self._generic.reasons()

    def worded(self, feasible: Iterable[str]) -> Worded:
        """What the undeclared filters say of the nodes the declared ones admit
        (``feasible``), as the generic path words it: each node's first rejecting filter,
        in profile order; each filter's errors, then its ``explain``."""
        job, nodes = self._job, self._state.nodes
        by_filter: list[list[Rejection]] = [[] for _ in self._filters]
        rejected: list[tuple[str, Status]] = []
        admitted = frozenset(feasible)
        for name in sorted(admitted):
            node = nodes[name]
            for i, policy in enumerate(self._filters):
                status = policy.filter(job, node)
                if not status.ok:
                    by_filter[i].append(Rejection(status, node))
                    rejected.append((name, status))
                    break
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
