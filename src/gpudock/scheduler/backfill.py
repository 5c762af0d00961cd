"""EASY backfill: the first blocked job gets a reservation; later jobs may not delay it.

Step 3c of the cycle. When the first job of the cycle's order is blocked for
lack of capacity, ``Reservation.make`` finds where and when it could start:

1. on each node whose filters would admit it with nothing running there
   (``PostFilter.admits_empty``), walk the running jobs' expected ends
   (``started_at + max_runtime``; stopping jobs end now) in time order until the
   profile's filters admit it on the node as it would be once they ended
   (``PostFilter.first_fit``): that is the node's shadow time;
2. take the node with the earliest shadow time (ties to the name), or, when
   no running job there has a ``max_runtime``, the first node where it fits
   once everything ends, with an unknown start;
3. reserve the lowest-indexed GPUs it could use there then.

Step 1 on every node would cost O(nodes x running jobs x GPUs) per blocked
job, so nodes are tried in order of a lower bound of their shadow time
(``_earliest``: the end of the k-th running job to end, where k jobs at the
least must release GPUs for the job's GPUs to be usable, as the capacity model
requires), stopping once the earliest found is before the next bound. The
answer is the same.

The reserved GPUs that are free now are *held* in the cycle's capacity
model, so later jobs cannot take them. A later job whose ``max_runtime``
ends before the shadow time may still use them (it cannot delay the
reservation); jobs without ``max_runtime`` backfill only onto GPUs the
blocked job cannot use. The reservation holds GPUs only: like CPUs, host
memory the reserved job will need is not kept from later jobs.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from gpudock.core.job import PendingReason
from gpudock.core.units import format_duration
from gpudock.scheduler.capacity import CycleState, usable_now
from gpudock.scheduler.post_filter import PostFilter, node_after
from gpudock.scheduler.release import (
    RunningOn,
    releases_needed,
    usable_bound,
)
from gpudock.scheduler.snapshot import JobRequest, ReservedGpus
from gpudock.scheduler.wording import UNKNOWN_START, clock, expected_start, gpus_of


@dataclass(slots=True)
class Reservation:
    job: JobRequest
    node: str
    start: float  # math.inf when unknown (running jobs without max_runtime)
    gpus: tuple[int, ...]  # GPU indices it will take on ``node``
    waiting_for: tuple[int, ...]  # running jobs whose end it waits for
    held: tuple[int, ...] = ()  # indices held now in the capacity model

    @classmethod
    def make(
        cls, job: JobRequest, state: CycleState, running: RunningOn, feasibility: PostFilter
    ) -> Reservation | None:
        """Steps 1-3; None when no node could ever hold the job.

        The node with the earliest ``(shadow time, name)``. Nodes are tried in
        order of a lower bound of that pair: first ``now`` (the job may fit
        there now) or the first end of a running job there (it must wait
        for one at least); a node that comes up gets the tighter bound of
        ``_earliest``, and is tried when that comes up in turn.
        """
        now, gpus, holders = running.now, job.gpus, running.holders
        whole = job.gpu_memory is None or gpus == 0  # ``usable_bound`` is ``idle_all``
        first_end = running.first_end
        order: list[tuple[float, str, bool]] = []  # (bound, node, tight?)
        for name, found in zip(state.views, state.fit_all(), strict=True):  # ``fit`` of each
            if (found.idle_all if whole else usable_bound(job, found)) >= gpus:
                order.append((now, name, False))
            elif name in holders:
                order.append((first_end(name), name, False))
        heapq.heapify(order)
        best: tuple[float, str, int] | None = None  # (start, node, jobs it waits for)
        while order and (best is None or order[0][:2] < best[:2]):
            bound, name, tight = heapq.heappop(order)
            if not tight:
                if not feasibility.admits_empty(job, name):
                    continue
                earliest = _earliest(job, state, running, name)
                if earliest is None:
                    continue
                if earliest > bound:
                    heapq.heappush(order, (earliest, name, True))
                    continue
            shadow = _shadow_time(job, state, running, name, feasibility)
            if shadow is not None and (best is None or shadow[:2] < best[:2]):
                best = shadow
        if best is None:
            return None
        return _shadow(job, state, running, best)

    def hold(self, state: CycleState) -> None:
        """Keep the reserved GPUs that are free now away from later jobs."""
        node = state.nodes[self.node]
        free = [g.index for g in node.gpus if g.index in self.gpus and usable_now(self.job, g)]
        state.hold(self.job, self.node, free)
        self.held = tuple(free)

    def release(self, state: CycleState) -> None:
        """Give the held GPUs back (to try a job that ends before ``start``)."""
        if self.held:
            state.release(self.job, self.node, self.held)
            self.held = ()

    def published(self) -> ReservedGpus:
        """What ``Plan.reservations`` shows of it: job, node, GPUs and start."""
        start = None if math.isinf(self.start) else self.start
        return ReservedGpus(self.job.id, self.job.user, self.node, self.gpus, start)

    def short_enough(self, job: JobRequest, now: float) -> bool:
        """True if ``job`` surely ends (``max_runtime``) before the reservation starts."""
        return job.max_runtime is not None and now + job.max_runtime <= self.start

    def reason(self, now: float) -> PendingReason:
        """Why the reserved job waits, with its ETA when known (``wording.expected_start``)."""
        waits = ", ".join(str(i) for i in self.waiting_for)
        label = "job" if len(self.waiting_for) == 1 else "jobs"
        eta = expected_start(self.start, now)
        if math.isinf(self.start):
            eta += " (the running jobs it waits for have no max_runtime)"
        elif waits:
            eta += f", when {label} {waits} reach{'es' if label == 'job' else ''} max_runtime"
        return PendingReason(
            "devices", f"next in line: {gpus_of(self.gpus, self.node)} reserved for it", eta
        )

    def blocked_reason(self, job: JobRequest, now: float) -> PendingReason:
        """For a later job that would fit but for this reservation.

        ``GPUs 2-3 of n0 are reserved for job 17 (expected to start ≈ 14:05)``:
        the GPUs held now (idle, but kept for the reserved job), its id, and
        its ETA in the server's local time, or ``when running jobs end``.
        """
        start = "expected to start " + (
            UNKNOWN_START if math.isinf(self.start) else f"≈ {clock(self.start, now)}"
        )
        if math.isinf(self.start):
            hint = "the reserved job's start is unknown, so no backfill onto its GPUs"
        else:
            hint = (
                f"with max_runtime at most {format_duration(max(0.0, self.start - now))} "
                "it could backfill now"
            )
        gpus = gpus_of(self.held or self.gpus, self.node)
        return PendingReason("priority", f"{gpus} reserved for job {self.job.id} ({start})", hint)


def _earliest(job: JobRequest, state: CycleState, running: RunningOn, name: str) -> float | None:
    """At most the node's shadow time for ``job``; None when it never fits there.

    Each running job's release makes at most the GPUs it holds usable, so at
    least k of them must end first (``release.releases_needed``).
    """
    usable = usable_bound(job, state.fit(name))
    if name not in running.holders:  # no running job there: it fits now or never
        return running.now if usable >= job.gpus else None
    jobs = running.jobs(name, state.nodes.gpus_of(name), state.unique_uuids)
    count = releases_needed(usable, jobs.most, job.gpus)
    if count is None:
        return None
    return running.now if count == 0 else jobs.ends[count - 1]


def _shadow_time(
    job: JobRequest, state: CycleState, running: RunningOn, name: str, feasibility: PostFilter
) -> tuple[float, str, int] | None:
    """``(shadow time, name, k)`` of step 1 on one node, where the job fits once the ``k``
    running jobs that end first there have ended; None when it never fits there."""
    jobs = running.jobs(name, state.nodes.gpus_of(name), state.unique_uuids)
    count = feasibility.first_fit(job, name, jobs.in_end_order())
    if count is None:
        return None
    return (running.now if count == 0 else jobs.ends[count - 1], name, count)


def _shadow(
    job: JobRequest, state: CycleState, running: RunningOn, found: tuple[float, str, int]
) -> Reservation:
    """Step 3: the reservation on the node ``_shadow_time`` found: the lowest-indexed GPUs
    the job could use there once those jobs have ended."""
    start, name, count = found
    jobs = running.jobs(name, state.nodes.gpus_of(name), state.unique_uuids)
    released = jobs.in_end_order()[:count]
    after = node_after(state.nodes[name], released)
    gpus = [g.index for g in after.gpus if usable_now(job, g)][: job.gpus]
    return Reservation(job, name, start, tuple(gpus), tuple(sorted(r.id for r in released)))
