"""The event-driven simulator: a trace, a cluster and a policy in; a ``RunRecord`` out.

A heap of timed events (arrivals, completions, preempted jobs releasing
their GPUs) drives a virtual clock. After the events of an instant (or, with
``cycle_interval``, of a scheduling period) the simulator builds a
scheduler ``Snapshot`` exactly as the server's store does (nodes with their
GPUs' allocations, pending requests, running jobs) and calls the real
``scheduler.cycle.run_cycle``. It then applies the ``Plan`` the way the
server's applier and controller do:

* a placement takes its GPUs and the job runs for its remaining work;
* a gang takes its part on every node at once;
* a resize (``Plan.resizes``, elastic jobs) stops the job as a preemption does,
  without a preemptor; an elastic job's work scales linearly with the GPUs it
  got (``_Job.speed``);
* a preemption stops the victim: from then on it makes no progress, holds
  its GPUs for ``preempt_grace`` seconds (SIGTERM, grace, SIGKILL: the
  executor's ``stop_grace``), then returns to pending with its original
  submit time, its preemptor named as ``preempted_for`` while it stops, so
  the scheduler keeps the freed GPUs for the preemptor, as live.

Work is not lost on preemption (jobs resume from a checkpoint), except
``restart_overhead`` seconds redone after each restart. Nothing here
decides where a job goes: every decision is the scheduler's.
"""

from __future__ import annotations

import gc
import heapq
import math
import time
from collections.abc import Sequence
from dataclasses import replace

from mypy_extensions import mypyc_attr

from gpudock.scheduler.admission import never_admitted_on, queue_usage
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.feasibility import never_fits
from gpudock.scheduler.framework import PlacementKey, placement_key
from gpudock.scheduler.snapshot import (
    Snapshot,
)
from gpudock.sim.cluster import ClusterSpec
from gpudock.sim.jobs import (
    _ACTIVE,
    ARRIVE,
    FINISH,
    GC_YOUNG,
    RELEASED,
    REPRIORITIZE_EVERY,
    SWEEP_GAP,
    TICK,
    Progress,
    ProgressFn,
    SimConfig,
    _Job,
    _running_view,
    _with_gpus,
    _with_priority,
)
from gpudock.sim.policies import SimPolicy
from gpudock.sim.results import RunRecord
from gpudock.sim.traces import TraceJob
from gpudock.sim.transitions import JobTransitions

__all__ = [
    "GC_YOUNG",
    "PROGRESS_EVERY",
    "SWEEP_GAP",
    "Progress",
    "ProgressFn",
    "SimConfig",
    "Simulator",
    "_Job",
    "_running_view",
    "_with_gpus",
    "_with_priority",
    "simulate",
]

PROGRESS_EVERY = 0.25
"""Seconds of wall time between two calls of a progress callback: once at the start,
then at most this often (checked every 256 event times, so a replay pays nothing
measurable for it), and once at the end (``done``)."""


@mypyc_attr(allow_interpreted_subclasses=True)  # tests subclass it (when compiled: ``_native``)
class Simulator(JobTransitions):
    """Replays ``jobs`` on ``cluster`` under ``policy`` (module doc); one run per instance.

    Its state and setup are ``SimState``'s (``state.py``), its priorities
    ``DynamicPriorities``' (``priorities.py``), its job transitions
    ``JobTransitions``' (``transitions.py``); here is the event loop.
    """

    # ── the loop ─────────────────────────────────────────────────────────

    def run(self) -> RunRecord:
        """Replay every job; returns the filled ``RunRecord``.

        The objects alive when the replay starts (the trace, the jobs' state)
        live through it, so they are kept out of the garbage collector's
        full collections while it runs (``gc.freeze``), and handed back after;
        not when the process has frozen objects already (``gc.unfreeze`` would
        hand back those too). A replay allocates millions of objects that die
        young (snapshot entries, plans), nearly all freed by their reference
        counts: while it runs, the youngest generation is collected every
        ``GC_YOUNG`` allocations rather than at the process's threshold
        (Python's default is 700; a threshold of 0, collection off, is kept),
        and the thresholds are restored after.
        """
        thresholds = gc.get_threshold()
        freeze = not gc.get_freeze_count()
        if freeze:
            gc.freeze()
        young = thresholds[0] and max(GC_YOUNG, thresholds[0])  # 0: automatic collection is off
        gc.set_threshold(young, thresholds[1], thresholds[2])
        try:
            return self._run()
        finally:
            gc.set_threshold(*thresholds)
            if freeze:
                gc.unfreeze()

    def _run(self) -> RunRecord:
        started = time.perf_counter()
        self._refuse()
        for number, job in enumerate(self._jobs, start=1):
            if job.state != "skipped":
                self._push(job.trace.submit_time, ARRIVE, number, 0)
        if self.policy.siblings:
            self._sweeps()
        self._note_usage(0.0)
        pending: dict[int, _Job] = {}
        running: dict[int, _Job] = {}
        interval = self.config.cycle_interval
        horizon = self.config.horizon
        elastic = any(j.trace.elastic_restart for j in self._jobs)  # growth needs cycles
        now = 0.0
        total = len(self._jobs) - self.record.skipped_jobs
        steps, shown = 0, started
        if self._report is not None:
            self._report(Progress(0.0, 0, total, 0.0))
        while self._heap:
            if self._report is not None:
                steps += 1
                if not steps & 255 and time.perf_counter() - shown >= PROGRESS_EVERY:
                    shown = time.perf_counter()
                    self._report(Progress(now, self._finished, total, shown - started))
            now = self._heap[0][0]
            if interval > 0:
                now = math.ceil(now / interval) * interval
            if horizon is not None and now > horizon:
                now = horizon
                break
            changed = False
            while self._heap and self._heap[0][0] <= now:
                at, kind, _, number, version = heapq.heappop(self._heap)
                if kind == TICK:  # no job: a refresh of dynamic priorities is due
                    self._tick_at, changed = math.inf, True
                    continue
                job = self._jobs[number - 1]
                if kind == ARRIVE:
                    job.state = "pending"
                    pending[number] = job
                    if self.policy.dynamic:
                        self._fresh.append(job)
                    if self.policy.siblings:
                        # no ``*job.klass``: compiled, a starred call goes through Python
                        queue, gpus = job.klass
                        job.sibling = self._estimator.sibling(queue, gpus, job.trace.submit_time)
                        if job.before and self._jobs[job.before - 1].state in _ACTIVE:
                            self._swept[number] = job
                    changed = True
                elif kind == FINISH and job.state == "running" and job.version == version:
                    self._finish(job, at)
                    running.pop(number)
                    changed = True
                elif kind == RELEASED and job.state == "stopping" and job.version == version:
                    self._release(job, at)
                    job.state, job.preempted_for = "pending", None
                    job.reprioritize_at = -math.inf
                    running.pop(number)
                    pending[number] = job
                    if self.policy.dynamic:
                        self._fresh.append(job)
                    changed = True
            if changed and (pending or (elastic and any(map(_may_grow, running.values())))):
                self._cycle(now, pending, running)
                if self.policy.dynamic and pending and running:
                    self._schedule_tick(now, running)
        self.record.horizon = now
        self.record.sim_seconds = time.perf_counter() - started
        if self._report is not None:
            self._report(Progress(now, self._finished, total, self.record.sim_seconds, True))
        self.record.jobs = [self._job_record(j) for j in self._jobs if j.state != "skipped"]
        return self.record

    def _refuse(self) -> None:
        """Refuse, as a server would at submit, the jobs it could never run: no node of
        the cluster ever admits them (``scheduler.feasibility.never_fits``, with the
        policy's profile; not under ``scheduler.never_fits: pending``, where such jobs wait
        unfinished), or their queue could never admit them (``never_admitted_on``, with
        declared queues). They are not replayed; ``record.refused`` keeps the reason, in
        the server's words and order (nodes first), with their trace ids."""
        nodes = tuple(self._nodes.values())
        profile = self._profile
        nodes_asked = self.policy.scheduler.never_fits != "pending"
        queues = self._queues.config if self._queues is not None else None
        found: dict[tuple[PlacementKey, str, str], str | None] = {}  # by what the checks read
        for job in self._jobs:
            r = job.request
            key = (placement_key(r), r.queue, r.user)
            if key not in found:
                refusal = never_fits(r, nodes, profile) if nodes_asked else None
                queue = never_admitted_on(queues, r, nodes) if queues is not None else None
                found[key] = next((w.message for w in (refusal, queue) if w is not None), None)
            why = found[key]
            if why is not None:
                job.state = "skipped"
                self.record.skipped_jobs += 1
                self.record.refused.setdefault(why, []).append(job.trace.job_id)

    def _schedule_tick(self, now: float, running: dict[int, _Job]) -> None:
        """Dynamic priorities: wake up when a running job's priority is due for a refresh.

        The server cycles every ``schedule_interval`` even without events;
        here a cycle runs when some running job may have fallen behind a
        pending one (its estimate moved), and not sooner than
        ``REPRIORITIZE_EVERY`` (or the cycle interval) after this one.
        """
        due = self._due  # kept by ``_reprioritize`` and ``_apply``
        if due is None:
            due = min(
                (j.reprioritize_at for j in running.values() if j.state == "running"),
                default=math.inf,
            )
        at = max(due, now + max(REPRIORITIZE_EVERY, self.config.cycle_interval))
        if at < self._tick_at and math.isfinite(at):
            self._tick_at = at
            self._push(at, TICK, 0, 0)

    def _cycle(self, now: float, pending: dict[int, _Job], running: dict[int, _Job]) -> None:
        self.record.cycles += 1
        if self.policy.dynamic:
            self._reprioritize(now, pending, running)
        if self._swept:
            self._hold_sweeps()
        snapshot = Snapshot(
            now=now,
            nodes=tuple(self._nodes.values()),
            pending=tuple([j.request for j in pending.values()]),
            running=tuple(self._running_views(running)),
        )
        if self._history is not None:  # as the server's controller does each cycle
            self._history = self._history.advance(now, queue_usage(snapshot))
            snapshot = replace(snapshot, queue_history=self._history)
        plan = run_cycle(
            snapshot,
            self._profile,
            queues=self._queues,
            queueing=self.policy.scheduler.queueing,
            explain=False,  # the simulator reads no pending reasons
            session=self._session,
        )
        self._apply(plan, now, pending, running)


def _may_grow(job: _Job) -> bool:
    """A running ``elastic: restart`` job below its maximum: a cycle may resize it."""
    trace = job.trace
    return (
        job.state == "running"
        and trace.elastic_restart
        and trace.max_gpus is not None
        and job.granted < trace.max_gpus
    )


def simulate(
    jobs: Sequence[TraceJob],
    cluster: ClusterSpec,
    policy: SimPolicy,
    config: SimConfig | None = None,
    progress: ProgressFn | None = None,
) -> RunRecord:
    """One run: ``Simulator(jobs, cluster, policy, config, progress).run()``."""
    return Simulator(jobs, cluster, policy, config, progress).run()
