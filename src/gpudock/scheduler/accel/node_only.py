"""Verdicts of the filters that declare ``NodeOnly``, kept per node and key across cycles.

A ``NodeOnly`` filter's verdict depends on the node's own traits and on its declared
``key`` of the job (``declarations.py``): one verdict per (filter, key, node) serves every
job with that key for the cycle, and later cycles while the node's snapshot view is the
very same object or one with the same traits (``declarations.same_traits``: a job
placed or ended there changes its view, not its traits). They are worked out with the
filter's own ``check``, on views (only those whose ``only_where`` trait is not empty,
where the filter names one), and kept in the caller's session (``NodeOnlyMemo``): per
filter and key, the nodes it rejected and the cycle whose views they hold for. Each
cycle compares its views with the last cycle's once, and notes the nodes whose traits
changed, that are new or that left; a key asked again checks only the nodes noted since
its verdicts were found, so it costs what changed, not a pass over every node. A key
unused for ``KEEP`` cycles is forgotten.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Set
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, is_not

from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.declarations import NodeOnly, same_traits
from gpudock.scheduler.framework import SUCCESS, Status
from gpudock.scheduler.snapshot import JobRequest, NodeView

__all__ = ["KEEP", "NodeOnlyMemo", "NodeOnlyVerdicts", "key_of", "names"]

KEEP = 8  # cycles a key's verdicts are kept while no job asks for them

VerdictKey = tuple[int, Hashable]  # (the filter's position in the profile, its key of the job)
Rejected = dict[str, Status]  # the nodes a filter rejects for a key, with its status
KeptKey = tuple[object, Hashable]  # (the filter's ``check``, its key of the job): any profile


def key_of(position: int, declared: NodeOnly, job: JobRequest) -> VerdictKey:
    """The verdicts ``job`` reads of the filter at ``position``."""
    return (position, None if declared.key is None else declared.key(job))


def names(rejections: Iterable[Rejected]) -> Set[str]:
    """The nodes some of ``rejections`` rejects (a view of the one mapping, when only one
    rejects any)."""
    found = [rejected for rejected in rejections if rejected]
    if len(found) == 1:
        return found[0].keys()
    return set().union(*found)


@dataclass(slots=True)
class NodeOnlyMemo:
    """What the caller's cycles keep (module doc): the latest cycle's number and views, by
    name; per recent cycle, the nodes whose traits changed or that left since the cycle
    before; per filter (by its ``check``, whatever its position) and key, the cycle its
    rejections hold for, and those."""

    cycle: int = 0
    views: dict[str, NodeView] = field(default_factory=dict)
    changed: dict[int, list[str]] = field(default_factory=dict)
    rejected: dict[KeptKey, tuple[int, Rejected]] = field(default_factory=dict)


class NodeOnlyVerdicts:
    """One cycle's node-only verdicts (module doc)."""

    def __init__(self, state: CycleState, memo: NodeOnlyMemo | None = None) -> None:
        memo = memo if memo is not None else NodeOnlyMemo()
        self.views = views = state.views
        kept = memo.views
        # nodes whose view is not the kept object (new ones too), found in C; of those,
        # the ones whose traits changed
        other = list(compress(views, map(is_not, map(kept.get, views), views.values())))
        changed = [
            n for n in other if (old := kept.get(n)) is None or not same_traits(old, views[n])
        ]
        if len(kept) > len(views) - sum(1 for n in other if n not in kept):
            changed += [n for n in kept if n not in views]  # some kept node left
        self._cycle = cycle = memo.cycle + 1
        oldest = cycle - KEEP
        memo.cycle, memo.views = cycle, views
        memo.changed = {c: names for c, names in memo.changed.items() if c > oldest}
        memo.changed[cycle] = changed
        memo.rejected = {k: found for k, found in memo.rejected.items() if found[0] >= oldest}
        self._memo = memo
        self._rejected: dict[VerdictKey, Rejected] = {}  # this cycle's, by key
        self._where: dict[str, dict[str, NodeView]] = {}  # views by ``only_where`` trait

    def rejected(self, position: int, declared: NodeOnly, job: JobRequest) -> Rejected:
        """The nodes the filter at ``position`` rejects for ``job``'s key, with its status:
        the kept verdict where a node's traits are the same, ``check`` else. The
        mapping is shared: callers read it and never change it."""
        key = key_of(position, declared, job)
        found = self._rejected.get(key)
        if found is None:
            kept_key = (declared.check, key[1])
            kept = self._memo.rejected.get(kept_key)
            if kept is None:
                found = _check(declared, job, self._checked(declared))
            else:
                found = self._catch_up(kept, declared, job)
            self._rejected[key] = found
            self._memo.rejected[kept_key] = (self._cycle, found)
        return found

    def _checked(self, declared: NodeOnly) -> dict[str, NodeView]:
        """The views ``check`` may reject on: those whose ``only_where`` trait is not empty
        (found in C, once a cycle per trait), or every one."""
        trait, views = declared.only_where, self.views
        if trait is not None and trait not in self._where:
            where = compress(views, map(attrgetter(trait), views.values()))
            self._where[trait] = {name: views[name] for name in where}
        return views if trait is None else self._where[trait]

    def rejecting(self, filters: Iterable[tuple[int, NodeOnly]], job: JobRequest) -> Set[str]:
        """The nodes some of the node-only ``filters`` (by position) rejects for ``job``."""
        return names([self.rejected(position, declared, job) for position, declared in filters])

    def _catch_up(
        self, kept: tuple[int, Rejected], declared: NodeOnly, job: JobRequest
    ) -> Rejected:
        """Rejections found in an earlier cycle brought to this cycle's views: the very same
        mapping when no node's traits changed since."""
        since, rejected = kept
        changed = self._memo.changed
        noted = [name for c in range(since + 1, self._cycle + 1) for name in changed[c]]
        if not noted:
            return rejected
        views = self._checked(declared)  # a node left out, or that left, passes
        out = dict(rejected)
        fresh = _check(declared, job, {n: views[n] for n in set(noted) if n in views})
        for name in noted:
            status = fresh.get(name)
            if status is None:
                out.pop(name, None)
            else:
                out[name] = status
        return out


def _check(declared: NodeOnly, job: JobRequest, views: dict[str, NodeView]) -> Rejected:
    """``declared.check`` of ``job`` on each of ``views``: the rejections. Most verdicts
    are the one ``SUCCESS``: those are told apart by identity, in C, without a loop."""
    statuses = list(map(declared.check, repeat(job, len(views)), views.values()))
    other = compress(zip(views, statuses, strict=True), map(is_not, statuses, repeat(SUCCESS)))
    return {name: status for name, status in other if not status.ok}
