"""One placement key's verdicts, answered from its class's index.

``KeyContext`` is what the index knows of a key: the job (any job with the key), the
filters it needs by declaration (``declared.JobFilters``), its class (``catalog.py``)
and its undeclared filters (``ExtraFilters``). ``ClassVerdicts`` holds what every kind
of verdict shares: the nodes the declared filters admit now (``feasible``) and the
reasons (``reasons.py``). ``IndexedVerdicts`` is the plain case, an exact order and no
per-node rule: the best node is the head of the best bucket.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gpudock.core.job import PendingReason
from gpudock.scheduler.accel.catalog import Catalog, ModelClassIndex
from gpudock.scheduler.accel.declared import JobFilters
from gpudock.scheduler.accel.extra import ExtraFilters, Worded
from gpudock.scheduler.accel.node_only import NodeOnlyVerdicts
from gpudock.scheduler.accel.reasons import explain_class
from gpudock.scheduler.accel.walks import first_node, walk
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.equivalence import KeyVerdicts
from gpudock.scheduler.framework import Profile
from gpudock.scheduler.rules import cpus_now, gpus_fit, memory_now
from gpudock.scheduler.snapshot import JobRequest

__all__ = ["ClassVerdicts", "IndexedVerdicts", "KeyContext"]


@dataclass(slots=True)
class KeyContext:
    """What the index knows of one placement key (module doc).

    ``cpus`` / ``memory``: a ``CPUS`` / ``HOST_MEMORY`` rule applies to the job and some
    node counts that resource (each candidate is then checked from its view).
    """

    job: JobRequest
    filters: JobFilters
    catalog: Catalog
    klass: ModelClassIndex
    state: CycleState
    verdicts: NodeOnlyVerdicts
    profile: Profile
    cpus: bool
    memory: bool
    extra: ExtraFilters | None

    def host_fits(self, name: str) -> bool:
        """The ``CPUS`` and ``HOST_MEMORY`` rules hold for the job on node ``name`` now."""
        state = self.state
        if self.cpus:
            view = state.views[name]
            if not cpus_now(self.job, view.cpus, state.nodes.free_cpus_of(name)):
                return False
        if self.memory:
            view = state.views[name]
            free = state.nodes.free_host_memory_of(name)
            if not memory_now(self.job, view.host_memory, free):
                return False
        return True


class ClassVerdicts:
    """What every kind of the index's verdicts shares (module doc)."""

    def __init__(self, key: KeyContext) -> None:
        self._key = key
        self._state = key.state
        self._job = key.job  # any job with this key: policies read only key fields
        self._catalog = key.catalog
        self._class = key.klass
        self._extra = key.extra
        self._blocked = -1  # ``state.released`` when found blocked (``block``)
        self._reasons: tuple[int, list[PendingReason]] | None = None  # (changes seen, reasons)
        self._generic: KeyVerdicts | None = None
        self._declared_first = key.filters.declared_first()

    def block(self, blocked: bool) -> None:
        """Record whether a search found no feasible node. A key found blocked, with no hold
        released since (``_blocked == state.released``, which each ``best`` tests first), is
        blocked still: capacity only shrank (the rest of the cycle, or until a backfill's
        release)."""
        self._blocked = self._state.released if blocked else -1

    def none_still(self) -> bool:
        """A search vetoed by an undeclared filter that found nothing holds still: no hold was
        given back since, and no node reserved on since is a member with room for the job's
        GPUs that the undeclared filters admit. Every other node is as it was (policies are
        pure in one node's state), so it is still rejected; a search costs what changed, not
        a walk of every candidate."""
        extra = self._extra
        if extra is None or extra.none_at < 0 or extra.none_released != self._state.released:
            return False
        changes = self._state.changes
        if extra.none_at == len(changes):
            return True
        for name, room in self.changed_members(extra.none_at):
            if room and extra.passes(name):
                return False  # it may take the job now: search again
        extra.none_at = len(changes)
        return True

    def changed_members(self, since: int) -> Iterator[tuple[str, bool]]:
        """The members of the class reserved on since ``state.changes[since]``, once each (the
        class caught up), each with whether it has room for the job's GPUs now (the ``GPUS``
        rule, where one applies)."""
        self._catalog.catch_up(self._class)
        fits = [part.index.fits for part in self._class.parts]
        gpus, job = self._key.filters.gpus, self._job
        for name in set(self._state.changes[since:]):
            for part in fits:
                fit = part.get(name)
                if fit is not None:
                    yield name, not gpus or gpus_fit(job, fit)
                    break

    def reasons(self) -> list[PendingReason]:
        """The generic path's reasons for a blocked key, in filter order: from the index
        (``reasons.py``) when the job's node-only filters come first and its undeclared ones
        last (``ExtraFilters.worded_now``); else the generic path's own."""
        extra = self._extra
        if not self._declared_first or (extra is not None and not extra.last):
            return self._generic_reasons()
        return self._indexed_reasons(None if extra is None else extra.worded_now(self.feasible))

    def feasible(self) -> Iterator[str]:
        """Every node the declared filters admit now: members of the class with room for
        the job's GPUs and, where they apply, its CPUs and memory."""
        self._catalog.catch_up(self._class)
        key = self._key
        check = key.cpus or key.memory
        return (
            name for _, name in walk(self._class, self._job) if not check or key.host_fits(name)
        )

    def _indexed_reasons(self, extra: Worded | None) -> list[PendingReason]:
        """``reasons`` as the declared filters word them, and ``extra``, what the undeclared
        ones say of the nodes the declared ones admit; memoized until a reservation."""
        seen = self._catalog.catch_up(self._class)
        if self._reasons is None or self._reasons[0] != seen:
            key = self._key
            host = key.cpus or key.memory
            found = explain_class(
                self._job,
                key.filters,
                self._catalog,
                self._class,
                key.state,
                key.verdicts,
                host,
                extra,
            )
            self._reasons = (seen, found)
        return self._reasons[1]

    def _generic_reasons(self) -> list[PendingReason]:
        """The generic path's reasons (``KeyVerdicts``), caught up with the state."""
        if self._generic is None:
            self._generic = KeyVerdicts(self._job, self._key.state, self._key.profile)
        else:
            self._generic.catch_up()
        return self._generic.reasons()


class IndexedVerdicts(ClassVerdicts):
    """``KeyVerdicts`` for one placement key whose order is exact and that needs no per-node
    rule checked: answered from its class's index (module doc)."""

    def best(self) -> str | None:
        """The best feasible node, or None; once None, None for the rest of the cycle."""
        if self._blocked == self._state.released:  # blocked (``block``): most jobs are
            return None
        self._catalog.catch_up(self._class)
        best = first_node(self._class, self._job)
        extra = self._extra
        if best is None or extra is None:
            self.block(best is None)
            return None if best is None else best[1]
        if extra.passes(best[1]):
            return best[1]
        if self.none_still():
            return None
        admitted = (name for _, name in walk(self._class, self._job) if extra.passes(name))
        return extra.found(next(admitted, None))

    def ranked(self) -> list[str]:
        """Every feasible node for a whole-GPU request, best first (score, then name).

        ``KeyVerdicts.ranked`` from the whole-GPU buckets: the nodes with at
        least ``gpus`` idle GPUs of the class, by ``sign * idle_all``.
        Multi-node gangs read it; O(feasible nodes log feasible nodes).
        """
        self._catalog.catch_up(self._class)
        gpus = self._job.gpus
        assert not self._job.shared, "shared gangs take the generic path"
        ranked = [
            (rank, name)
            for part in self._class.parts
            for rank, key in part.index.ranked_whole()
            if key[1] >= gpus
            for name in part.index.whole()[key]
        ]
        ranked.sort()
        extra = self._extra
        if extra is not None:
            return [name for _, name in ranked if extra.passes(name)]
        return [name for _, name in ranked]
