"""Verdicts for a key whose scorers declare no order: the scorers themselves, on the index's
candidates (the class's members with room for the job, its CPUs and memory checked from
the views, and the undeclared filters run): once per key, then only on the nodes
reserved on since, as ``equivalence.KeyVerdicts`` does on every node. No cliff: the cost
grows with the candidates, not with the cluster.
"""

from __future__ import annotations

import heapq

from gpudock.scheduler.accel.verdicts import ClassVerdicts, KeyContext
from gpudock.scheduler.accel.walks import walk

__all__ = ["RankedVerdicts"]


class RankedVerdicts(ClassVerdicts):
    """Every candidate's score by the profile's scorers, best first (module doc)."""

    def __init__(self, key: KeyContext) -> None:
        super().__init__(key)
        self._scores: dict[str, float] = {}  # the feasible candidates
        self._heap: list[tuple[float, str]] = []  # (-score, name); stale entries skipped
        self._scorers = key.profile.scorers
        self._host = key.cpus or key.memory
        self._catalog.catch_up(self._class)
        self._seen = len(key.state.changes)
        for _, name in walk(self._class, self._job):
            self._evaluate(name)

    def _evaluate(self, name: str) -> None:
        """Score node ``name`` if every filter admits the job there now; else drop it."""
        key = self._key
        self._scores.pop(name, None)
        if self._host and not key.host_fits(name):
            return
        if self._extra is not None and not self._extra.passes(name):
            return
        state, job = key.state, self._job
        node = state.nodes[name]
        score = 0.0
        for policy, weight in self._scorers:
            score += weight * policy.score(job, node, state)
        self._scores[name] = score
        heapq.heappush(self._heap, (-score, name))

    def _catch_up(self) -> None:
        """Re-evaluate the members reserved on since the last call (the others are as they
        were): those with room for the job's GPUs still."""
        changes = self._key.state.changes
        if self._seen == len(changes):
            return
        for name, room in self.changed_members(self._seen):  # the heap orders ties by name
            if room:
                self._evaluate(name)
            else:
                self._scores.pop(name, None)
        self._seen = len(changes)

    def best(self) -> str | None:
        """The feasible node with the highest score (ties to the lowest name), or None."""
        if self._blocked == self._state.released:
            return None
        self._catch_up()
        heap, scores = self._heap, self._scores
        while heap:
            neg_score, name = heap[0]
            if scores.get(name) == -neg_score:
                return name
            heapq.heappop(heap)  # stale: the node changed or became infeasible
        self.block(self._extra is None)
        return None

    def ranked(self) -> list[str]:
        """Every feasible node, best first (score, then name)."""
        self._catch_up()
        scores = self._scores
        return sorted(scores, key=lambda name: (-scores[name], name))
