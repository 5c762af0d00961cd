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
from gpudock.scheduler.framework import FilterPolicy, Profile
from gpudock.scheduler.snapshot import JobRequest


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

    def passes(self, name: str) -> bool:
        """Whether every undeclared filter admits node ``name`` now."""
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
        indexed: Callable[[], list[PendingReason]],
        feasible: Callable[[], Iterable[str]],
    ) -> list[PendingReason]:
        """The generic path's reasons for this key, on the current state.

        ``feasible``: the nodes every declared filter admits now. When there is
        none, and the undeclared filters come last (so the generic path runs them
        on no node) or admit every node, each node's first failing filter is a
        declared one: ``indexed`` (the index's own wording) is the answer. Else
        a ``KeyVerdicts``'s: an undeclared filter rejects some node, or a node
        passes every filter now (an undeclared filter, not monotone in capacity,
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
