"""Job transitions during a replay: a Plan applied as the server's applier and
controller apply it (start, stop a victim), and jobs finishing or releasing their GPUs.

Part of the simulator's chain (``state.py``); methods of ``Simulator``.
"""

from __future__ import annotations

import math

from mypy_extensions import mypyc_attr

from gpudock.scheduler.snapshot import (
    Placement,
    Plan,
)
from gpudock.sim.jobs import (
    FINISH,
    RELEASED,
    _Job,
)
from gpudock.sim.priorities import DynamicPriorities


@mypyc_attr(allow_interpreted_subclasses=True)  # tests subclass ``Simulator``
class JobTransitions(DynamicPriorities):
    """How a Plan and the clock move jobs between states (module doc)."""

    def _apply(
        self, plan: Plan, now: float, pending: dict[int, _Job], running: dict[int, _Job]
    ) -> None:
        """Start what the Plan places, stop its victims; keeps ``_due`` the earliest refresh
        of a running job (None when a stop may have removed it)."""
        started: list[tuple[int, tuple[Placement, ...]]] = [
            (p.job_id, (p,)) for p in plan.placements
        ]
        started.extend((g.job_id, g.parts) for g in plan.gangs)
        for job_id, parts in started:
            job = pending.pop(job_id)
            self._start(job, parts, now)
            running[job_id] = job
            if self._due is not None and job.reprioritize_at < self._due:
                self._due = job.reprioritize_at
        stopped: set[int] = set()
        for preemption in plan.preemptions:
            if preemption.victim_id in stopped:
                continue
            stopped.add(preemption.victim_id)
            victim = self._jobs[preemption.victim_id - 1]
            if victim.state == "running":
                self._stop(victim, preemption.preemptor_id, now)
                if self._due is not None and victim.reprioritize_at <= self._due:
                    self._due = None
        for resize in plan.resizes:
            job = self._jobs[resize.job_id - 1]
            if job.state == "running" and resize.job_id not in stopped:
                self._restart(job, now)
                self._due = None

    # ── job transitions ──────────────────────────────────────────────────

    def _start(self, job: _Job, parts: tuple[Placement, ...], now: float) -> None:
        job.state, job.parts, job.attempt_start = "running", parts, now
        job.version += 1
        if job.trace.max_gpus is not None:  # elastic: as many as it got, this attempt
            job.granted = len(parts[0].gpu_uuids)
        job.running_views = ()
        if self.policy.dynamic:  # its rank as it started, until the next refresh
            job.estimated_end = now + job.ranked_as
        if job.first_start is None:
            job.first_start = now
            indices = [self._uuid_index[u][1] for part in parts for u in part.gpu_uuids]
            self._first_gpus[job.trace.job_id] = tuple(sorted(indices))
            if parts[0].mig is not None:
                self._first_migs[job.trace.job_id] = parts[0].mig
        for part in parts:
            self._change(part, job.request, +1)
        self._note_usage(now, job, +1)
        self._push(now + job.remaining / job.speed, FINISH, job.request.id, job.version)

    def _finish(self, job: _Job, at: float) -> None:
        self._finished += 1
        self._progress(job, at)
        job.remaining = 0.0
        job.state, job.end = "done", at
        self._release(job, at)
        siblings = self.policy.siblings
        submitted = job.trace.submit_time if siblings else None  # siblings read submit times
        attained = job.ran - job.wasted  # its run time, without the work it redid
        self._estimator.record(job.trace.queue, job.trace.total_gpus, attained, submitted)
        if siblings:
            self._swept.pop(job.request.id, None)
            self._unhold(job)
            self._new_sibling(job)

    def _stop(self, job: _Job, preemptor: int, now: float) -> None:
        self._lose(job, now)
        job.preemptions += 1
        self.record.preemptions += 1
        job.state, job.preempted_for = "stopping", preemptor
        job.version += 1
        job.running_views = ()
        self._push(now + self.config.preempt_grace, RELEASED, job.request.id, job.version)

    def _restart(self, job: _Job, now: float) -> None:
        """An elastic job stopped to grow (``Plan.resizes``): it loses what a preemption
        loses (``_lose``) and is pending again after ``preempt_grace``, with no preemptor."""
        self._lose(job, now)
        self.record.resizes += 1
        job.state, job.preempted_for = "stopping", None
        job.version += 1
        job.running_views = ()
        self._push(now + self.config.preempt_grace, RELEASED, job.request.id, job.version)

    def _lose(self, job: _Job, now: float) -> None:
        """What a stop at ``now`` costs ``job``: the run since its last checkpoint (its
        ``checkpoint`` interval, counted from the start of the run; none without one) and
        its restart ``overhead`` are work to do again, and it holds its GPUs for
        ``preempt_grace`` without progress: all of it GPU time lost (``job.lost``)."""
        run = max(0.0, now - job.attempt_start)
        self._progress(job, now)
        redo = job.overhead
        if job.checkpoint is not None and job.checkpoint > 0.0:
            redo += math.fmod(run, job.checkpoint) * job.speed
        job.remaining += redo
        job.owed += redo
        job.lost += (redo / job.speed + self.config.preempt_grace) * job.gpus

    def _progress(self, job: _Job, now: float) -> None:
        ran = max(0.0, now - job.attempt_start)
        speed = job.speed
        work = ran * speed
        redone = job.owed if job.owed < work else work  # the run redid this first
        job.owed -= redone
        job.wasted += redone / speed
        job.remaining = max(0.0, job.remaining - work)
        job.ran += ran
        job.service += ran * job.gpus
        job.attempt_start = now

    def _release(self, job: _Job, at: float) -> None:
        if job.state == "stopping":
            job.service += (at - job.attempt_start) * job.gpus  # held, no progress
        for part in job.parts:
            self._change(part, job.request, -1)
        job.parts = ()
        self._note_usage(at, job, -1)
