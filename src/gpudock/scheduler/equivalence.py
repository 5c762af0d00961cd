"""Verdicts shared by equivalent jobs, kept current one node at a time.

Filters and scorers are pure functions of a job's ``placement_key`` and one
node's state (the contract in ``framework.py``). So within a cycle:

* jobs with equal keys are *equivalent*: they get the same verdict on every
  node, and one ``KeyVerdicts`` serves them all;
* a reservation changes one node, so a ``KeyVerdicts`` only re-evaluates the
  nodes named in ``CycleState.changes`` since it last looked.

Cost: O(nodes) filter and score calls the first time a key is seen, then
O(log nodes) per job plus O(keys) per reservation, instead of O(nodes) per
job. Thousands of identical pending jobs on a full cluster cost one
evaluation and one explanation. (kube-scheduler once had an "equivalence
cache"; the purity contract is what makes this one safe.)
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Protocol

from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import CycleState, NodeState
from gpudock.scheduler.framework import (
    PlacementKey,
    Profile,
    Rejection,
    Status,
    StatusCode,
    placement_key,
)
from gpudock.scheduler.snapshot import JobRequest


class Verdicts(Protocol):
    """Every node's verdict for one placement key (``KeyVerdicts``, ``IndexedVerdicts``)."""

    def best(self) -> str | None:
        """The best feasible node (ties to the lowest name); None when no node passes."""
        ...

    def reasons(self) -> list[PendingReason]:
        """Why no node can take a job with this key: at least one reason."""
        ...

    def ranked(self) -> list[str]:
        """Every feasible node, best first (score, then name); multi-node gangs read it."""
        ...


class VerdictCache(Protocol):
    """Verdicts by placement key, kept current with the ``CycleState`` (step 3a-b, step 4)."""

    def verdicts(self, job: JobRequest) -> Verdicts:
        """Current verdicts for ``job``'s key (caught up with every reservation so far)."""
        ...


def no_nodes_reason() -> PendingReason:
    return PendingReason("health", "no nodes are registered", "runs once a node joins")


def fallback_reason(total_nodes: int) -> PendingReason:
    """When no filter explains its rejections."""
    return PendingReason("devices", f"no node can take it now ({total_nodes} checked)")


def never_constraint(status: Status) -> bool:
    """A "never on this node" rejection of the ``constraints`` layer (selector, taints,
    model)."""
    return status.code is StatusCode.UNRESOLVABLE and status.layer == "constraints"


def constraints_reason(statuses: list[Status]) -> PendingReason:
    """Every node is ruled out by some constraint, though no single one rules out all.

    ``statuses`` are the rejections, one per node, sorted by node name.
    """
    listed = "; ".join(s.reason for s in statuses[:3])
    more = f"; and {len(statuses) - 3} more" if len(statuses) > 3 else ""
    return PendingReason(
        "constraints",
        f"no node meets all its constraints: {listed}{more}",
        "runs only if its node selector, tolerations or GPU model change, or a node "
        "that meets them all joins",
    )


class KeyVerdicts:
    """Every node's filter verdict and score for one placement key.

    ``best()`` is the feasible node with the highest weighted score, ties to
    the lowest name; ``reasons()`` explains why there is none. Call
    ``catch_up`` before either once the ``CycleState`` may have changed.
    """

    def __init__(self, job: JobRequest, state: CycleState, profile: Profile) -> None:
        self._job = job  # any job with this key: policies read only key fields
        self._state = state
        self._profile = profile
        self._scores: dict[str, float] = {}  # feasible nodes
        self._heap: list[tuple[float, str]] = []  # (-score, name); stale entries skipped
        self._rejected: dict[str, tuple[int, Status]] = {}  # name -> (filter index, status)
        self._reasons: list[PendingReason] | None = None
        self._seen = len(state.changes)
        for node in state.nodes.values():
            self._evaluate(node)

    def catch_up(self) -> None:
        """Re-evaluate the nodes reserved on since the last call."""
        changes = self._state.changes
        if self._seen == len(changes):
            return
        for name in sorted(set(changes[self._seen :])):
            self._evaluate(self._state.nodes[name])
        self._seen = len(changes)
        self._reasons = None

    def best(self) -> str | None:
        """The name of the best feasible node, or None when no node passes every filter."""
        heap = self._heap
        while heap:
            neg_score, name = heap[0]
            if self._scores.get(name) == -neg_score:
                return name
            heapq.heappop(heap)  # stale: the node changed or became infeasible
        return None

    def ranked(self) -> list[str]:
        """Every feasible node, best first (score, then name): O(nodes log nodes)."""
        scores = self._scores
        return sorted(scores, key=lambda name: (-scores[name], name))

    def rejected(self) -> Mapping[str, tuple[int, Status]]:
        """Each rejected node's first failing filter (its position in the profile) and
        status, as of the last ``catch_up``; read-only."""
        return self._rejected

    def reasons(self) -> list[PendingReason]:
        """Why no node can take a job with this key: at least one reason, memoized.

        Each filter that rejected nodes summarises its own rejections, in
        filter order; filter errors are reported as they are.
        """
        if self._reasons is None:
            self._reasons = self._explain()
        return self._reasons

    def _evaluate(self, node: NodeState) -> None:
        """Run the filters in order (first failure wins), then score if all passed."""
        self._scores.pop(node.name, None)
        self._rejected.pop(node.name, None)
        for i, policy in enumerate(self._profile.filters):
            status = policy.filter(self._job, node)
            if not status.ok:
                self._rejected[node.name] = (i, status)
                return
        state = self._state
        score = sum(w * policy.score(self._job, node, state) for policy, w in self._profile.scorers)
        self._scores[node.name] = score
        heapq.heappush(self._heap, (-score, node.name))

    def _explain(self) -> list[PendingReason]:
        total = len(self._state.nodes)
        if total == 0:
            return [no_nodes_reason()]
        filters = self._profile.filters
        by_filter: list[list[Rejection]] = [[] for _ in filters]
        for name in sorted(self._rejected):
            i, status = self._rejected[name]
            by_filter[i].append(Rejection(status, self._state.nodes[name]))
        reasons: list[PendingReason] = []
        for policy, rejections in zip(filters, by_filter, strict=True):
            if not rejections:
                continue
            reasons.extend(
                PendingReason(r.status.layer or policy.layer, r.status.reason)
                for r in rejections
                if r.status.code is StatusCode.ERROR
            )
            reason = policy.explain(self._job, rejections, total)
            if reason is not None:
                reasons.append(reason)
        if not reasons and len(self._rejected) == total:
            statuses = [self._rejected[name][1] for name in sorted(self._rejected)]
            if all(never_constraint(status) for status in statuses):
                return [constraints_reason(statuses)]  # each rules out some, together all
        return reasons or [fallback_reason(total)]


class EquivalenceCache:
    """One ``KeyVerdicts`` per placement key seen in this cycle, created on first use."""

    def __init__(self, state: CycleState, profile: Profile) -> None:
        self._state = state
        self._profile = profile
        self._by_key: dict[PlacementKey, KeyVerdicts] = {}

    def verdicts(self, job: JobRequest) -> KeyVerdicts:
        """Current verdicts for ``job``'s key (caught up with every reservation so far)."""
        key = placement_key(job)
        verdicts = self._by_key.get(key)
        if verdicts is None:
            verdicts = self._by_key[key] = KeyVerdicts(job, self._state, self._profile)
        else:
            verdicts.catch_up()
        return verdicts
