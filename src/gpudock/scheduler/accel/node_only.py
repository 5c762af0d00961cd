"""Verdicts of the filters that declare ``NodeOnly``, kept per node and key across cycles.

A ``NodeOnly`` filter's verdict depends on the node's own traits and on its declared
``key`` of the job (``declarations.py``), so one verdict per (filter, key, node) serves
every job with that key for the whole cycle, and for later cycles while the node's
snapshot view is the very same object. ``NodeOnlyVerdicts`` works them out with the
filter's own ``check``, on views (no node is copied), and keeps the latest cycle's in
the caller's session (``NodeOnlyMemo``). A view that changed costs one ``check`` per
key; an unchanged one, one identity test.

Step 4 words their rejections with their declared ``word``, on the same views.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.declarations import NodeOnly
from gpudock.scheduler.framework import Status
from gpudock.scheduler.snapshot import JobRequest, NodeView

__all__ = ["NodeOnlyMemo", "NodeOnlyVerdicts", "Verdicts", "key_of"]

VerdictKey = tuple[int, Hashable]  # (the filter's position in the profile, its key of the job)
Verdicts = dict[str, tuple[NodeView, Status]]  # every node's view and verdict, by name


def key_of(position: int, declared: NodeOnly, job: JobRequest) -> VerdictKey:
    """The verdicts ``job`` reads of the filter at ``position``."""
    return (position, None if declared.key is None else declared.key(job))


@dataclass(slots=True)
class NodeOnlyMemo:
    """What the latest cycle worked out, for the caller's next (``SchedulerSession``):
    ``verdicts`` per filter and key. Only what that cycle used is kept."""

    verdicts: dict[VerdictKey, Verdicts] = field(default_factory=dict)


class NodeOnlyVerdicts:
    """One cycle's node-only verdicts (module doc)."""

    def __init__(self, state: CycleState, memo: NodeOnlyMemo | None = None) -> None:
        memo = memo if memo is not None else NodeOnlyMemo()
        self.views = state.views
        self._kept = memo.verdicts
        self._now: dict[VerdictKey, Verdicts] = {}
        self._rejected: dict[VerdictKey, dict[str, Status]] = {}
        memo.verdicts = self._now

    def of(self, position: int, declared: NodeOnly, job: JobRequest) -> Verdicts:
        """Every node's verdict for ``job``'s key of the filter at ``position``."""
        key = key_of(position, declared, job)
        found = self._now.get(key)
        if found is None:
            found = self._now[key] = self._work_out(key, declared, job)
        return found

    def rejected(self, position: int, declared: NodeOnly, job: JobRequest) -> dict[str, Status]:
        """The nodes the filter at ``position`` rejects for ``job``'s key, with its status."""
        key = key_of(position, declared, job)
        found = self._rejected.get(key)
        if found is None:
            verdicts = self.of(position, declared, job)
            found = self._rejected[key] = {n: s for n, (_, s) in verdicts.items() if not s.ok}
        return found

    def admits(self, position: int, declared: NodeOnly, job: JobRequest, name: str) -> bool:
        """Does the filter at ``position`` admit ``job`` on node ``name``?"""
        return name not in self.rejected(position, declared, job)

    def _work_out(self, key: VerdictKey, declared: NodeOnly, job: JobRequest) -> Verdicts:
        """The verdicts of ``key`` on every node: the last cycle's for a view that is the
        same object, ``check`` on the others."""
        kept = self._kept.get(key)
        check = declared.check
        out: Verdicts = {}
        if kept is None:
            for name, view in self.views.items():
                out[name] = (view, check(job, view))
            return out
        for name, view in self.views.items():
            entry = kept.get(name)
            out[name] = (
                entry if entry is not None and entry[0] is view else (view, check(job, view))
            )
        return out
