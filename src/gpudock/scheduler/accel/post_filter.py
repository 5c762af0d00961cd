"""The capacity index's ``PostFilter``: ``post_filter.FiltersAfter``'s answers, from what the
filters declare.

Once some jobs left a node, a ``NodeOnly`` filter says what it said before (its kept
verdict: ``node_only.py``); the capacity rules (``NeedsGpus``, ``NeedsHost``,
``NeedsGroup``) are counted by ``release.Release`` without copying the node; only the
undeclared filters run, on a copy of the node as it would be (``post_filter.node_after``).
``admits_empty`` reads the rules on the node's view, once per placement key and node;
where every filter the key needs declares itself, the answer depends only on the view,
and the caller's next cycle takes it while the node's view is the very same object
(``EmptyMemo``, in the session). Per placement key, the nodes its node-only filters
reject are gathered once a cycle.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass, field, replace

from gpudock.scheduler.accel.declared import FilterPlan, JobFilters
from gpudock.scheduler.accel.node_only import NodeOnlyVerdicts
from gpudock.scheduler.capacity import CycleState, NodeState
from gpudock.scheduler.framework import PlacementKey, placement_key
from gpudock.scheduler.post_filter import emptied, greedy_victims, node_after
from gpudock.scheduler.release import Release
from gpudock.scheduler.rules import (
    Resource,
    cpus_ever,
    gpus_empty,
    group_empty,
    memory_ever,
    needs_group,
)
from gpudock.scheduler.snapshot import JobRequest, NodeView, RunningJob

__all__ = ["DeclaredPostFilter", "EmptyMemo"]

Answers = dict[str, tuple[NodeView, bool]]  # admits_empty by node, and the view it read


@dataclass(slots=True)
class EmptyMemo:
    """The latest cycle's ``admits_empty`` answers per placement key, with the views they
    were found on."""

    answers: dict[PlacementKey, Answers] = field(default_factory=dict)


@dataclass(slots=True)
class _Key:
    """What the post-filter knows of a placement key: the filters a job with it needs, the
    nodes some node-only filter of those rejects, its ``admits_empty`` answers (this
    cycle's and the kept ones) and its ``Release`` per node, with the changes they saw."""

    filters: JobFilters
    rejected: Set[str]
    empty: Answers
    kept: Answers
    releases: dict[str, tuple[int, Release]] = field(default_factory=dict)


class DeclaredPostFilter:
    """``PostFilter`` from declarations (module doc); ``state`` as it is when asked."""

    def __init__(
        self,
        state: CycleState,
        plan: FilterPlan,
        verdicts: NodeOnlyVerdicts,
        memo: EmptyMemo | None = None,
    ) -> None:
        memo = memo if memo is not None else EmptyMemo()
        self._state = state
        self._plan = plan
        self._verdicts = verdicts
        self._kept = memo.answers
        self._answers: dict[PlacementKey, Answers] = {}
        memo.answers = self._answers
        self._keys: dict[PlacementKey, _Key] = {}
        self._last: tuple[JobRequest, _Key] | None = None

    def _key(self, job: JobRequest) -> _Key:
        """What is known of ``job``'s placement key (the last job's, asked again)."""
        last = self._last
        if last is not None and last[0] is job:
            return last[1]
        key = placement_key(job)
        found = self._keys.get(key)
        if found is None:
            filters = self._plan.for_job(job)
            node_only = ((i, d) for i, _, d in filters.node_only)
            rejected = self._verdicts.rejecting(node_only, job)
            empty = self._answers[key] = {}
            found = self._keys[key] = _Key(filters, rejected, empty, self._kept.get(key, {}))
        self._last = (job, found)
        return found

    def _release(self, job: JobRequest, known: _Key, name: str) -> Release:
        """``Release`` of the declared capacity rules ``job`` needs on ``name`` now."""
        seen = len(self._state.changes)
        found = known.releases.get(name)
        if found is None or found[0] != seen:
            state, view, filters = self._state, self._state.views[name], known.filters
            nodes = state.nodes
            release = Release(
                job if filters.gpus else replace(job, gpus=0),
                nodes.gpus_of(name),
                view.cpus if filters.cpus else None,
                nodes.free_cpus_of(name),
                view.host_memory if filters.memory else None,
                nodes.free_host_memory_of(name),
                bool(filters.group),
            )
            found = known.releases[name] = (seen, release)
        return found[1]

    def _extras_after(self, job: JobRequest, filters: JobFilters, node: NodeState) -> bool:
        return all(policy.filter(job, node).ok for _, policy in filters.extras)

    def admits_empty(self, job: JobRequest, name: str) -> bool:
        known = self._key(job)
        found = known.empty.get(name)
        if found is None:
            view = self._state.views[name]
            found = known.kept.get(name)
            if found is None or found[0] is not view or known.filters.extras:
                found = (view, self._empty_answer(job, known, view))
            known.empty[name] = found
        return found[1]

    def _empty_answer(self, job: JobRequest, known: _Key, view: NodeView) -> bool:
        """``admits_empty`` worked out: the kept node-only verdicts, the declared rules on
        the view with every job gone (``rules.py``), the undeclared filters on a copy."""
        if view.name in known.rejected:
            return False
        filters = known.filters
        if filters.gpus and gpus_empty(job, view.gpus) < job.gpus:
            return False
        for _, _, declared in filters.host:
            if declared.resource is Resource.CPUS:
                if not cpus_ever(job, view.cpus):
                    return False
            elif not memory_ever(job, view.host_memory):
                return False
        if filters.group and needs_group(job) and group_empty(job, view.gpus) < job.gpus:
            return False
        if not filters.extras:
            return True
        node = NodeState.from_view(emptied(view))
        return all(f.filter(job, node).ok for _, f in filters.extras)

    def fits_after(self, job: JobRequest, name: str, leaving: Sequence[RunningJob]) -> bool:
        known = self._key(job)
        if name in known.rejected or not self._release(job, known, name).fits(leaving):
            return False
        if not known.filters.extras:
            return True
        node = self._state.nodes[name]
        after = node_after(node, leaving) if leaving else node
        return self._extras_after(job, known.filters, after)

    def first_fit(self, job: JobRequest, name: str, ending: Sequence[RunningJob]) -> int | None:
        known = self._key(job)
        if name in known.rejected:
            return None
        if known.filters.extras:
            for k in range(len(ending) + 1):
                if self.fits_after(job, name, ending[:k]):
                    return k
            return None
        return self._release(job, known, name).first_fit(ending)

    def victims(
        self, job: JobRequest, name: str, candidates: Sequence[RunningJob]
    ) -> list[RunningJob] | None:
        known = self._key(job)
        if name in known.rejected:
            return None
        if known.filters.extras:
            return greedy_victims(lambda leaving: self.fits_after(job, name, leaving), candidates)
        return self._release(job, known, name).pick(candidates)
