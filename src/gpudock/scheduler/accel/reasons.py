"""Step 4 from the index: why no node of a class can take a job, in each filter's own words.

As the generic path (``equivalence.KeyVerdicts``), each filter words the nodes it was the
first to reject, in profile order, but no filter runs on every node: a node-only
filter's rejections are its kept verdicts (``ModelClassIndex.rejected()``), worded by its
declared ``word`` on the views; the capacity rules' are the class's members, split by
the first rule each fails and worded by the rules' ``word`` from summaries (groups of
alike nodes for ``GPUS``, ``(name, total, free)`` rows for ``CPUS`` and ``HOST_MEMORY``).
It needs the job's node-only filters first (``JobFilters.declared_first``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from operator import attrgetter
from typing import overload

from gpudock.core.job import PendingReason
from gpudock.scheduler.accel.catalog import Catalog, ModelClassIndex, shared_groups
from gpudock.scheduler.accel.declared import JobFilters
from gpudock.scheduler.accel.extra import Worded
from gpudock.scheduler.accel.node_only import NodeOnlyVerdicts
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.declarations import FitGroup, HostRow, NeedsHost, TraitRejection
from gpudock.scheduler.equivalence import (
    constraints_reason,
    fallback_reason,
    never_constraint,
    no_nodes_reason,
)
from gpudock.scheduler.framework import Status, StatusCode
from gpudock.scheduler.node_fit import NodeFit
from gpudock.scheduler.rules import Resource, cpus_now, gpus_fit, memory_now
from gpudock.scheduler.snapshot import JobRequest, NodeView

__all__ = ["explain_class", "members"]

_code = attrgetter("code")


def members(klass: ModelClassIndex) -> Iterator[tuple[str, NodeFit]]:
    """Every member of ``klass`` with its fit for the class."""
    for part in klass.parts:
        yield from part.index.fits.items()


def explain_class(
    job: JobRequest,
    filters: JobFilters,
    catalog: Catalog,
    klass: ModelClassIndex,
    state: CycleState,
    verdicts: NodeOnlyVerdicts,
    host: bool,
    extra: Worded | None = None,
) -> list[PendingReason]:
    """The generic path's reasons for a job of ``klass`` that no node can take (module doc).

    ``host``: some node counts a resource a ``NeedsHost`` filter of the job checks (else
    those filters pass everywhere and no member is rejected by them). ``extra``: what the
    undeclared filters, all after the declared ones, say of the members the declared
    ones admit (``ExtraFilters.worded``).
    """
    total = catalog.node_count
    if total == 0:
        return [no_nodes_reason()]
    if klass.worded is None:  # node-only verdicts hold for the whole cycle: worded once
        klass.worded = _node_only(job, filters, klass, verdicts, total)
    reasons = list(klass.worded)
    if klass.has_members():
        admitted = extra[2] if extra is not None else frozenset()
        reasons.extend(_capacity(job, filters, klass, state, host, total, admitted))
    if extra is not None:
        reasons.extend(extra[0])
    if not reasons:
        every = [item for rejected in klass.rejected().values() for item in rejected.items()]
        if extra is not None and len(extra[1]) == sum(1 for _ in members(klass)):
            every += extra[1]  # every member rejected by an undeclared filter: no capacity
        every.sort()
        if len(every) == total and all(never_constraint(status) for _, status in every):
            return [constraints_reason([status for _, status in every])]
    return reasons or [fallback_reason(total)]


def _node_only(
    job: JobRequest,
    filters: JobFilters,
    klass: ModelClassIndex,
    verdicts: NodeOnlyVerdicts,
    total: int,
) -> list[PendingReason]:
    """The node-only filters' reasons: each one's declared ``word`` (its ``explain``, on
    traits) of the nodes it is the first to reject, on their views, in profile order
    (errors reported as they are)."""
    reasons: list[PendingReason] = []
    views = verdicts.views
    first = klass.rejected()
    for position, policy, declared in filters.node_only:
        rejected = first.get(position)
        if not rejected:
            continue
        if StatusCode.ERROR in map(_code, rejected.values()):  # rare: scanned in C
            reasons.extend(
                PendingReason(status.layer or policy.layer, status.reason)
                for _, status in sorted(rejected.items())
                if status.code is StatusCode.ERROR
            )
        found = declared.word(job, _Rejections(rejected, views), total)
        if found is not None:
            reasons.append(found)
    return reasons


def _capacity(
    job: JobRequest,
    filters: JobFilters,
    klass: ModelClassIndex,
    state: CycleState,
    host: bool,
    total: int,
    admitted: frozenset[str],
) -> list[PendingReason]:
    """The capacity filters' reasons for the members of ``klass`` they reject, in profile
    order (``admitted``: members every declared filter admits, left out)."""
    gpus = filters.gpus[0] if filters.gpus else None
    rules = filters.host if host else ()
    if not rules and not admitted:
        if gpus is None:
            return []
        reason = gpus[2].word(job, _groups(job, klass, None), total)
        return [reason] if reason is not None else []
    order = sorted(
        [(i, d) for i, _, d in rules] + ([(gpus[0], None)] if gpus is not None else []),
        key=lambda entry: entry[0],
    )
    rows: dict[int, list[HostRow]] = {i: [] for i, _ in order}
    rest: list[tuple[str, NodeFit]] = []
    views, nodes = state.views, state.nodes
    for name, fit in sorted(members(klass)):
        if name in admitted:
            continue
        for position, declared in order:
            if declared is None:
                if not gpus_fit(job, fit):
                    rest.append((name, fit))
                    break
            elif not _host_fits(job, declared, state, name):
                view = views[name]
                if declared.resource is Resource.CPUS:
                    rows[position].append((name, view.cpus or 0.0, nodes.free_cpus_of(name)))
                else:
                    free = nodes.free_host_memory_of(name)
                    rows[position].append((name, view.host_memory or 0, free))
                break
    out: list[PendingReason] = []
    for position, declared in order:
        found: PendingReason | None = None
        if declared is None:
            if rest and gpus is not None:
                found = gpus[2].word(job, _groups(job, klass, rest), total)
        elif rows[position]:
            found = declared.word(job, rows[position], total)
        if found is not None:
            out.append(found)
    return out


def _host_fits(job: JobRequest, declared: NeedsHost, state: CycleState, name: str) -> bool:
    """Does the ``CPUS`` or ``HOST_MEMORY`` rule hold for ``job`` on node ``name`` now?"""
    view, nodes = state.views[name], state.nodes
    if declared.resource is Resource.CPUS:
        return cpus_now(job, view.cpus, nodes.free_cpus_of(name))
    return memory_now(job, view.host_memory, nodes.free_host_memory_of(name))


def _groups(
    job: JobRequest, klass: ModelClassIndex, rest: list[tuple[str, NodeFit]] | None
) -> list[FitGroup]:
    """The members the ``GPUS`` rule rejects (all of them when ``rest`` is None), as groups
    of nodes alike in what the rule reads for ``job``."""
    if job.gpu_memory is not None and job.gpus > 0:
        return klass.groups() if rest is None else shared_groups(rest)
    if rest is None:
        groups: list[FitGroup] = []
        for part in klass.parts:
            fits = part.index.fits
            groups.extend(
                (fits[names[0]], names[0], len(names)) for names in part.index.whole().values()
            )
        return groups
    by_key: dict[tuple[int, int], FitGroup] = {}
    for name, fit in rest:  # sorted by name: the first of a key is its lowest
        key = (fit.total, fit.idle)
        found = by_key.get(key)
        by_key[key] = (fit, name, 1) if found is None else (found[0], found[1], found[2] + 1)
    return list(by_key.values())


class _Rejections(Sequence[TraitRejection]):
    """A filter's rejections (node name -> status) as the ``(status, view)`` pairs its
    ``word`` reads, sorted by node name: sorted and made only when read, since most words
    only count them."""

    __slots__ = ("_by_name", "_rejected", "_views")

    def __init__(self, rejected: Mapping[str, Status], views: Mapping[str, NodeView]) -> None:
        self._by_name = rejected
        self._rejected: list[tuple[str, Status]] | None = None
        self._views = views

    def __len__(self) -> int:
        return len(self._by_name)

    def _sorted(self) -> list[tuple[str, Status]]:
        if self._rejected is None:
            self._rejected = sorted(self._by_name.items())
        return self._rejected

    @overload
    def __getitem__(self, index: int) -> TraitRejection: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[TraitRejection]: ...
    def __getitem__(self, index: int | slice) -> TraitRejection | Sequence[TraitRejection]:
        if isinstance(index, slice):
            return [(status, self._views[name]) for name, status in self._sorted()[index]]
        name, status = self._sorted()[index]
        return status, self._views[name]
