"""What the capacity index takes from a profile: its filters sorted by what they declare.

The index never looks at a policy's class. It reads each filter's declaration
(``declarations.declared_filter``) and each scorer's per-job order
(``declarations.declared_order``), and sorts the filters into ``node_only`` (kept
verdicts that make a job's class of nodes, ``catalog.py``), ``gpus`` (the buckets,
``index.py``), ``host`` (CPUs, host memory, checked per candidate from its view),
``group`` (GPU topology: the generic path places such a job; ``release.Release``
answers them in step 5) and ``extras``, every filter that declares nothing, run on the
candidates (``extra.py``). A profile needs a ``NeedsGpus`` filter for the index.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.declarations import (
    NeedsGpus,
    NeedsGroup,
    NeedsHost,
    NodeOnly,
    ScoreOrder,
    Walked,
    declared_filter,
    declared_order,
)
from gpudock.scheduler.framework import FilterPolicy, Profile
from gpudock.scheduler.rules import Resource
from gpudock.scheduler.snapshot import JobRequest

__all__ = ["FilterPlan", "JobFilters", "usable", "walk_order"]

Placed = tuple[int, FilterPolicy]  # (position in the profile, filter)


@dataclass(frozen=True, slots=True)
class JobFilters:
    """The filters that one job needs run, by kind (those that ``skip`` it left out)."""

    node_only: tuple[tuple[int, FilterPolicy, NodeOnly], ...]
    gpus: tuple[tuple[int, FilterPolicy, NeedsGpus], ...]
    host: tuple[tuple[int, FilterPolicy, NeedsHost], ...]
    group: tuple[Placed, ...]
    extras: tuple[Placed, ...]

    @property
    def cpus(self) -> bool:
        """A ``CPUS`` rule applies to the job."""
        return any(d.resource is Resource.CPUS for _, _, d in self.host)

    @property
    def memory(self) -> bool:
        """A ``HOST_MEMORY`` rule applies to the job."""
        return any(d.resource is Resource.HOST_MEMORY for _, _, d in self.host)

    def declared_first(self) -> bool:
        """Every node-only filter the job needs comes before its others: then a node's first
        rejection (the one the reference words) is found kind by kind (``reasons.py``)."""
        others = [i for i, _, _ in (*self.gpus, *self.host)]
        others += [i for i, _ in (*self.group, *self.extras)]
        return min(others, default=1 << 30) > max((i for i, _, _ in self.node_only), default=-1)

    def extras_last(self) -> bool:
        """Every undeclared filter comes after every declared one the job needs: then the
        generic path runs them only on nodes the declared ones admit."""
        declared = [i for i, _, _ in (*self.node_only, *self.gpus, *self.host)]
        declared += [i for i, _ in self.group]
        return min((i for i, _ in self.extras), default=1 << 30) > max(declared, default=-1)


class FilterPlan:
    """A profile's filters sorted by their declarations (module doc); what a job needs, made
    once per set of filters skipped (``skips`` reads only the job's key)."""

    def __init__(self, profile: Profile) -> None:
        node_only: list[tuple[int, FilterPolicy, NodeOnly]] = []
        gpus: list[tuple[int, FilterPolicy, NeedsGpus]] = []
        host: list[tuple[int, FilterPolicy, NeedsHost]] = []
        group: list[Placed] = []
        extras: list[Placed] = []
        for i, policy in enumerate(profile.filters):
            found = declared_filter(policy)
            if isinstance(found, NodeOnly):
                node_only.append((i, policy, found))
            elif isinstance(found, NeedsGpus):
                gpus.append((i, policy, found))
            elif isinstance(found, NeedsHost):
                host.append((i, policy, found))
            elif isinstance(found, NeedsGroup):
                group.append((i, policy))
            else:
                extras.append((i, policy))
        self.all = JobFilters(
            tuple(node_only), tuple(gpus), tuple(host), tuple(group), tuple(extras)
        )
        self.filters = profile.filters
        # (id, ``skips``) of each filter that defines it (``framework.skipped``)
        defined = ((id(f), getattr(f, "skips", None)) for f in profile.filters)
        self._skipping: tuple[tuple[int, Callable[[JobRequest], bool]], ...] = tuple(
            (i, skips) for i, skips in defined if skips is not None
        )
        self._jobs: dict[frozenset[int], JobFilters] = {}  # by the filters skipped (ids)

    def for_job(self, job: JobRequest) -> JobFilters:
        """The filters ``job`` needs run (``framework.skipped`` ones left out); jobs that skip
        the same filters share one ``JobFilters``."""
        skips = frozenset(i for i, skip in self._skipping if skip(job))
        found = self._jobs.get(skips)
        if found is None:
            a = self.all
            found = self._jobs[skips] = JobFilters(
                tuple(f for f in a.node_only if id(f[1]) not in skips),
                tuple(f for f in a.gpus if id(f[1]) not in skips),
                tuple(f for f in a.host if id(f[1]) not in skips),
                tuple(f for f in a.group if id(f[1]) not in skips),
                tuple(f for f in a.extras if id(f[1]) not in skips),
            )
        return found


def usable(profile: Profile) -> bool:
    """True when the index can answer ``profile``: some filter declares ``NeedsGpus``."""
    return any(isinstance(declared_filter(f), NeedsGpus) for f in profile.filters)


def walk_order(profile: Profile, job: JobRequest, state: CycleState) -> ScoreOrder | None:
    """The order the index walks nodes in for ``job``: the one scorer's declaration, or the
    common ``fewest`` of several scorers that each declare an exact ``Walked`` order; None
    when the scorers declare nothing usable (``ranked.RankedVerdicts`` then scores the
    candidates with the scorers themselves)."""
    scorers = profile.scorers
    if not scorers or any(w <= 0 for _, w in scorers):
        return None
    if len(scorers) == 1:
        return declared_order(scorers[0][0], job, state)
    orders = [declared_order(s, job, state) for s, _ in scorers]
    first = orders[0]
    for order in orders:
        if not isinstance(order, Walked) or order.score is not None:
            return None
        if not isinstance(first, Walked) or order.fewest != first.fewest:
            return None
    return first
