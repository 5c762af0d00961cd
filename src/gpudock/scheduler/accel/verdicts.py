"""``IndexedVerdicts``: one placement key's verdicts, answered from its model class's index.

The verdicts of a job that asks for no CPUs (or of a cluster where no node
counts them): its best node is the head of the best bucket, its ranked nodes
(gangs of whole GPUs) the whole-GPU buckets by score then name, its reasons
worded with the policies' own wording functions from the index's counters.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.accel.catalog import (
    Catalog,
    ModelClassIndex,
    shared_groups,
)
from gpudock.scheduler.accel.extra import ExtraFilters
from gpudock.scheduler.accel.index import (
    ANY_MODEL,
    NodeFit,
)
from gpudock.scheduler.accel.walks import (
    closest_shared,
    closest_whole,
    closest_whole_of,
    first_node,
    walk,
    whole_buckets,
)
from gpudock.scheduler.equivalence import (
    fallback_reason,
    no_nodes_reason,
)
from gpudock.scheduler.policies.cpu_capacity import cpus_reason
from gpudock.scheduler.policies.gpu_capacity import capacity_reason
from gpudock.scheduler.policies.gpu_model import model_reason
from gpudock.scheduler.policies.node_health import health_reason
from gpudock.scheduler.snapshot import JobRequest


class IndexedVerdicts:
    """``KeyVerdicts`` for one placement key, answered from its model class's index."""

    def __init__(
        self,
        job: JobRequest,
        catalog: Catalog,
        klass: ModelClassIndex,
        extra: ExtraFilters | None = None,
    ) -> None:
        self._job = job  # any job with this key
        self._catalog = catalog
        self._class = klass
        self._extra = extra
        self.blocked = False
        self._reasons: tuple[int, list[PendingReason]] | None = None  # (changes seen, reasons)

    def best(self) -> str | None:
        """The best feasible node, or None; once None, None for the rest of the cycle."""
        if self.blocked:
            return None
        self._catalog.catch_up(self._class)
        best = first_node(self._class, self._job)
        extra = self._extra
        if best is None or extra is None:
            self.blocked = best is None  # capacity only shrinks within a cycle
            return None if best is None else best[1]
        if extra.passes(best[1]):
            return best[1]
        if extra.unchanged():
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

    def reasons(self) -> list[PendingReason]:
        """The generic path's reasons for a blocked key, in filter order.

        Memoized until the next reservation (only step 4 asks, after the last).
        With unknown filters, the generic path's own (``ExtraFilters.reasons``).
        """
        if self._extra is not None:
            return self._extra.reasons(self._indexed_reasons, self._feasible)
        return self._indexed_reasons()

    def _feasible(self) -> Iterator[str]:
        """Every node the built-in filters admit now (``ExtraFilters.reasons``): those with
        room for the job's GPUs (it asks for no CPUs, or no node counts them)."""
        self._catalog.catch_up(self._class)
        return (name for _, name in walk(self._class, self._job))

    def _indexed_reasons(self) -> list[PendingReason]:
        """``reasons`` as the built-in filters alone word them."""
        seen = self._catalog.catch_up(self._class)
        if self._reasons is None or self._reasons[0] != seen:
            self._reasons = (seen, self._explain())
        return self._reasons[1]

    def _explain(self, short: Sequence[tuple[str, float, float]] = ()) -> list[PendingReason]:
        """The reasons; ``short``: ``(name, CPUs, free CPUs)`` of the available members that
        lack the job's CPUs (``CpuVerdicts``), which ``cpu_capacity`` rejects before
        ``gpu_capacity`` sees them."""
        job, klass, total = self._job, self._class, self._catalog.node_count
        if total == 0:
            return [no_nodes_reason()]
        fits = klass.has_members()
        if not fits and not klass.down:
            if klass.excluded == total:
                return [self._catalog.affinity_reason(job)]  # node_affinity rules out all
            if klass.members is not ANY_MODEL and klass.excluded == 0:
                return [model_reason(job, self._catalog.gpu_names)]  # every node lacks the model
            return [self._catalog.constraints_reason(job)]  # affinity and model, together
        reasons: list[PendingReason] = []
        if klass.down:
            reasons.append(health_reason(klass.down))
        rest: list[tuple[str, NodeFit]] | None = None  # None: every available member
        if short:
            cpus = cpus_reason(job, short, total)
            if cpus is not None:
                reasons.append(cpus)
            lacking = {name for name, _, _ in short}
            rest = [
                (name, fit)
                for part in klass.parts
                for name, fit in part.index.fits.items()
                if name not in lacking
            ]
        if job.gpus > 0 and (fits if rest is None else rest):  # they all fail gpu_capacity
            if job.shared:
                assert job.gpu_memory is not None
                groups = klass.groups() if rest is None else shared_groups(rest)
                closest = closest_shared(groups, job.gpus, job.gpu_memory)
            elif rest is None:
                closest = closest_whole(klass.parts, job.gpus)
            else:
                closest = closest_whole_of(whole_buckets(rest), job.gpus)
            reasons.append(capacity_reason(job, closest))
        return reasons or [fallback_reason(total)]
