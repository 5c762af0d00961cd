"""Verdicts of the filters that declare ``NodeOnly``, kept per node and key across cycles.

A ``NodeOnly`` filter's verdict depends on the node's own traits and on its declared
``key`` of the job (``declarations.py``): one verdict per (filter, key, node) serves every
job with that key for the cycle, and later cycles while the node's snapshot view is the
very same object. They are worked out with the filter's own ``check``, on views, and the
latest cycle's are kept in the caller's session (``NodeOnlyMemo``).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.declarations import NodeOnly
from gpudock.scheduler.framework import Status
from gpudock.scheduler.snapshot import JobRequest, NodeView

__all__ = ["NodeOnlyMemo", "NodeOnlyVerdicts", "key_of"]

VerdictKey = tuple[int, Hashable]  # (the filter's position in the profile, its key of the job)
Verdicts = dict[str, tuple[NodeView, Status]]  # every node's view and verdict, by name


def key_of(position: int, declared: NodeOnly, job: JobRequest) -> VerdictKey:
    """The verdicts ``job`` reads of the filter at ``position``."""
    return (position, None if declared.key is None else declared.key(job))


@dataclass(slots=True)
class NodeOnlyMemo:
    """The verdicts the latest cycle used, per filter and key, for the caller's next."""

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

    def rejected(self, position: int, declared: NodeOnly, job: JobRequest) -> dict[str, Status]:
        """The nodes the filter at ``position`` rejects for ``job``'s key, with its status:
        the last cycle's verdict where a node's view is the same object, ``check`` else."""
        key = key_of(position, declared, job)
        found = self._rejected.get(key)
        if found is None:
            kept, check = self._kept.get(key, {}), declared.check
            out: Verdicts = {}
            for name, view in self.views.items():
                entry = kept.get(name)
                out[name] = (
                    entry if entry is not None and entry[0] is view else (view, check(job, view))
                )
            self._now[key] = out
            found = self._rejected[key] = {n: s for n, (_, s) in out.items() if not s.ok}
        return found

    def admits(self, position: int, declared: NodeOnly, job: JobRequest, name: str) -> bool:
        """Does the filter at ``position`` admit ``job`` on node ``name``?"""
        return name not in self.rejected(position, declared, job)
