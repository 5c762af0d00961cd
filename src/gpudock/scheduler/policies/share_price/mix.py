"""Which jobs share prices place, and the job mix they are priced by.

``priced``: the jobs ``SharePricing`` places (shares of one GPU on one node).
``job_mix``: the mix a cycle's prices follow, ``Snapshot.workload`` when the
caller gives it, else the snapshot's running and pending jobs.
``MixTracker``: the mix kept from cycle to cycle while it has not drifted,
so that a long-lived caller's cycles solve the LP rarely. The share-price
plugin keeps one in the caller's ``SchedulerSession`` when the session
learns (``SchedulerSession(learn=True)``: the controller, the simulator).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from gpudock.scheduler.snapshot import JobRequest, RunningJob, Snapshot, WorkloadEntry

DRIFT = 0.1
"""``MixTracker`` republishes the mix once its proportions have moved this far (total
variation distance)."""
GROWTH = 2.0
"""... or once the number of jobs has grown or shrunk this many times."""
RECOUNT = 8
"""``MixTracker.apply`` counts the running jobs over this many cycles (an eighth each), then
republishes if the mix has drifted."""


def priced(job: JobRequest) -> bool:
    """True for the jobs ``SharePricing`` places: shares of one GPU on one node."""
    return job.gpus == 1 and job.gpu_memory is not None and job.nodes == 1


def job_mix(snapshot: Snapshot) -> list[WorkloadEntry]:
    """``Snapshot.workload``, or the running and pending jobs as ``(gpus, gpu_memory, cpus,
    count)``."""
    if snapshot.workload is not None:
        return list(snapshot.workload)
    counts = running_shapes(snapshot.running)
    counts.update(pending_shapes(snapshot.pending))
    return [(gpus, memory, cpus, n) for (gpus, memory, cpus), n in counts.items()]


Shape = tuple[int, int | None, float | None]
"""A job's ``(gpus, gpu_memory per GPU or None, cpus)``: what the mix counts."""


def running_shapes(running: Sequence[RunningJob]) -> Counter[Shape]:
    """How many of ``running`` have each shape."""
    return Counter([(len(r.gpu_uuids), r.memory_per_gpu, r.cpus) for r in running])


def pending_shapes(pending: Sequence[JobRequest]) -> Counter[Shape]:
    """How many of ``pending`` have each shape."""
    return Counter([(j.gpus, j.gpu_memory if j.gpus else None, j.cpus) for j in pending])


class MixTracker:
    """The job mix a cycle is priced by, kept while it has not drifted.

    A cycle whose rounded mix is new solves one LP (milliseconds for a few share sizes,
    tens of milliseconds for tens). The share-price plugin keeps one tracker per learning
    session (``SharePrice.pre_score``) and gives every snapshot ``apply``'s workload: in
    effect ``workload(job_mix(snapshot))``, the mix last published, replaced when the
    shapes' proportions have moved by at least ``drift`` (total variation distance) or
    the number of jobs has grown or shrunk by ``growth`` times since. Deterministic in the
    sequence of mixes it is given.
    """

    def __init__(
        self, drift: float = DRIFT, growth: float = GROWTH, recount: int = RECOUNT
    ) -> None:
        self.drift = drift
        self.growth = growth
        self.recount = recount
        self._since = 0  # ``apply`` calls in this round (``apply``)
        self._round: Counter[Shape] = Counter()  # the shapes counted so far this round
        self.published: tuple[WorkloadEntry, ...] | None = None
        self._parts: dict[tuple[int, int | None, float | None], float] = {}
        self._jobs = 0
        self.publications = 0

    def apply(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with ``workload`` set to the tracked mix; ``snapshot`` itself when no
        pending job is a one-GPU share (nothing to price: the mix is not even counted) or it
        carries a workload already.

        The first call counts the running and pending jobs (``job_mix``). After it the count
        is spread over ``recount`` calls, so that no cycle pays for all the running jobs:
        the ``k``-th call of a round counts every ``recount``-th running job from the
        ``k``-th, the last also the pending jobs, and then the round's counts are the mix
        (``workload``). O(running jobs / ``recount`` + pending jobs) per call.
        """
        if snapshot.workload is not None or not any(priced(j) for j in snapshot.pending):
            return snapshot
        published = self.published
        if published is None:
            return replace(snapshot, workload=self.workload(job_mix(snapshot)))
        self._round.update(running_shapes(snapshot.running[self._since :: self.recount]))
        self._since += 1
        if self._since >= self.recount:
            self._round.update(pending_shapes(snapshot.pending))
            counted = [(gpus, memory, cpus, n) for (gpus, memory, cpus), n in self._round.items()]
            self._since, self._round = 0, Counter()
            published = self.workload(counted)
        return replace(snapshot, workload=published)

    def workload(self, mix: Sequence[WorkloadEntry]) -> tuple[WorkloadEntry, ...]:
        """The mix to pass for a cycle whose current mix is ``mix``."""
        jobs = sum(n for *_, n in mix)
        parts: dict[tuple[int, int | None, float | None], float] = {}
        for gpus, memory, cpus, n in mix:
            parts[(gpus, memory, cpus)] = parts.get((gpus, memory, cpus), 0.0) + n / max(jobs, 1)
        if self.published is not None and jobs > 0 and self._jobs > 0:
            ratio = jobs / self._jobs
            shapes = sorted(parts.keys() | self._parts.keys(), key=str)  # a fixed order: a sum
            moved = sum(abs(parts.get(k, 0.0) - self._parts.get(k, 0.0)) for k in shapes) / 2
            if moved < self.drift and 1 / self.growth < ratio < self.growth:
                return self.published
        self.published = tuple(mix)
        self._parts, self._jobs = parts, jobs
        self.publications += 1
        return self.published
