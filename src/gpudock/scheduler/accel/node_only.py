"""Verdicts of the filters that declare ``NodeOnly``, kept per node and key across cycles.

A ``NodeOnly`` filter's verdict depends on the node's own traits and on its declared
``key`` of the job (``declarations.py``): one verdict per (filter, key, node) serves every
job with that key for the cycle, and later cycles while the node's snapshot view is the
very same object. They are worked out with the filter's own ``check``, on views, and the
latest cycle's are kept in the caller's session (``NodeOnlyMemo``): the nodes each
filter and key rejected, with the views they were found on. A cycle compares its views
with those once, by identity, and checks again only the nodes whose view is another
object, so a key seen last cycle costs what changed, not a pass over every node.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Set
from dataclasses import dataclass, field

from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.declarations import NodeOnly
from gpudock.scheduler.framework import SUCCESS, Status
from gpudock.scheduler.snapshot import JobRequest, NodeView

__all__ = ["NodeOnlyMemo", "NodeOnlyVerdicts", "key_of", "names"]

VerdictKey = tuple[int, Hashable]  # (the filter's position in the profile, its key of the job)
Rejected = dict[str, Status]  # the nodes a filter rejects for a key, with its status


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
    """The latest cycle's node views, by name, and the rejections it found on them, per
    filter and key, for the caller's next cycle."""

    views: dict[str, NodeView] = field(default_factory=dict)
    rejected: dict[VerdictKey, Rejected] = field(default_factory=dict)


class NodeOnlyVerdicts:
    """One cycle's node-only verdicts (module doc)."""

    def __init__(self, state: CycleState, memo: NodeOnlyMemo | None = None) -> None:
        memo = memo if memo is not None else NodeOnlyMemo()
        self.views = state.views
        self._kept_views, self._kept = memo.views, memo.rejected
        self._changed: list[str] | None = None  # nodes whose view is not the kept one
        self._gone: list[str] = []  # kept nodes no longer in the snapshot
        self._rejected: dict[VerdictKey, Rejected] = {}
        memo.views, memo.rejected = self.views, self._rejected

    def rejected(self, position: int, declared: NodeOnly, job: JobRequest) -> Rejected:
        """The nodes the filter at ``position`` rejects for ``job``'s key, with its status:
        the last cycle's verdict where a node's view is the same object, ``check`` else.
        The mapping is shared: callers read it and never change it."""
        key = key_of(position, declared, job)
        found = self._rejected.get(key)
        if found is None:
            kept = self._kept.get(key)
            if kept is None:
                found = self._check(declared, job, self.views)
            else:
                found = self._catch_up(kept, declared, job)
            self._rejected[key] = found
        return found

    def rejecting(self, filters: Iterable[tuple[int, NodeOnly]], job: JobRequest) -> Set[str]:
        """The nodes some of the node-only ``filters`` (by position) rejects for ``job``."""
        return names([self.rejected(position, declared, job) for position, declared in filters])

    @staticmethod
    def _check(declared: NodeOnly, job: JobRequest, views: dict[str, NodeView]) -> Rejected:
        """``declared.check`` of ``job`` on each of ``views``: the rejections."""
        check, out = declared.check, {}
        for name, view in views.items():
            status = check(job, view)
            if status is not SUCCESS and not status.ok:  # most verdicts are the one SUCCESS
                out[name] = status
        return out

    def _catch_up(self, kept: Rejected, declared: NodeOnly, job: JobRequest) -> Rejected:
        """``kept`` (the last cycle's rejections for the key) brought to this cycle's views:
        the very same mapping when no view changed."""
        changed = self._changes()
        if not changed and not self._gone:
            return kept
        out = dict(kept)
        for name in self._gone:
            out.pop(name, None)
        fresh = self._check(declared, job, {name: self.views[name] for name in changed})
        for name in changed:
            status = fresh.get(name)
            if status is None:
                out.pop(name, None)
            else:
                out[name] = status
        return out

    def _changes(self) -> list[str]:
        """The nodes whose view is not the object the kept verdicts were found on (worked
        out once per cycle), and the kept nodes that left (``_gone``)."""
        if self._changed is None:
            kept = self._kept_views
            views = self.views
            self._changed = [n for n, v in views.items() if kept.get(n) is not v]
            new = sum(1 for n in self._changed if n not in kept)
            if len(kept) > len(views) - new:  # some kept node is not in this snapshot
                self._gone = [n for n in kept if n not in views]
        return self._changed
