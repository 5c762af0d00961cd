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
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from mypy_extensions import mypyc_attr

from gpudock.core.affinity import parse_selector
from gpudock.queue.config import QueuesConfig
from gpudock.queue.history import UsageHistory
from gpudock.scheduler.admission import QueuePolicy, queue_usage
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.feasibility import never_fits
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import (
    GpuView,
    JobRequest,
    NodeView,
    Placement,
    Plan,
    RunningJob,
    Snapshot,
)
from gpudock.sim.cluster import ClusterSpec
from gpudock.sim.estimate import SIBLING_GAP, RemainingEstimator
from gpudock.sim.policies import PARTITION_LABEL, SimPolicy, remaining_priority
from gpudock.sim.results import JobRecord, RunRecord
from gpudock.sim.traces import TraceJob, as_gang

ARRIVE, FINISH, RELEASED, TICK = 0, 1, 2, 3  # event kinds; at equal times, arrivals first
REPRIORITIZE_EVERY = 30.0  # seconds: the shortest refresh period of a dynamic priority
SWEEP_GAP = 120.0  # seconds: a job this soon after the previous one of its class joins its sweep
GC_YOUNG = 50_000  # allocations between collections of the youngest generation during a run
_ACTIVE = frozenset({"pending", "running", "stopping"})


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Knobs of the simulated world (not of the policy).

    ``cycle_interval``: 0 runs a cycle at every instant with events (the
    server also wakes on every submission and completion); a positive value
    batches events into periods, as the server's ``schedule_interval`` does.
    """

    cycle_interval: float = 0.0
    preempt_grace: float = 10.0
    restart_overhead: float = 0.0
    horizon: float | None = None  # stop at this virtual time; None: when all jobs end
    seed: int = 0  # nonzero: jobs submitted at the same instant arrive in a seeded random order


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a replay is, for a display (``simulate(..., progress=fn)``); the engine
    draws nothing itself."""

    sim_time: float  # the virtual clock, seconds from the trace's first submission
    finished: int  # jobs finished so far
    total: int  # jobs in the replay (those that can never fit are skipped, not counted)
    wall: float  # seconds of real time since the replay started
    done: bool = False  # the last call, once the replay has ended


ProgressFn = Callable[[Progress], None]
PROGRESS_EVERY = 0.25
"""Seconds of wall time between two calls of a progress callback: once at the start,
then at most this often (checked every 256 event times, so a replay pays nothing
measurable for it), and once at the end (``done``)."""


@dataclass(slots=True)
class _Job:
    """One trace job's mutable state during a run."""

    trace: TraceJob
    request: JobRequest
    remaining: float  # seconds of work left
    state: str = "future"  # future, pending, running, stopping, done, skipped
    parts: tuple[Placement, ...] = ()
    attempt_start: float = 0.0
    version: int = 0  # invalidates stale FINISH events
    first_start: float | None = None
    end: float | None = None
    preemptions: int = 0
    service: float = 0.0  # GPU-seconds held while running
    ran: float = 0.0  # seconds run over all attempts (attained service)
    preempted_for: int | None = None
    running_views: tuple[RunningJob, ...] = ()  # its snapshot entries (one per node); () stale
    priority: int = 0  # its scheduler priority now (``request``'s is brought up to it when pending)
    klass: tuple[str, float] = ("", 0.0)  # dynamic priorities: its estimator class
    reprioritize_at: float = -math.inf  # dynamic priorities: next recomputation
    rank: float = 0.0  # dynamic priorities: the last remaining time computed
    rank_from: float = math.inf  # ... which holds for attained times from this
    rank_until: float = -math.inf  # ... up to (not including) this
    rank_version: int = -1  # ... while its class's estimator ``version`` is this
    ranked_as: float = math.nan  # the remaining time its ``priority`` was computed from
    sibling: float | None = None  # siblings: the run time of its close sibling, if finished
    before: int = 0  # siblings: the number of the job before it in its sweep (0: none)
    after: int = 0  # siblings: ... and of the job after it
    place: int = 0  # siblings: its index in its class's jobs in submission order
    shown: int | None = None  # siblings: a running job's priority held down by its sweep

    @property
    def gpus(self) -> float:
        fraction = self.trace.gpu_fraction if self.trace.gpu_fraction is not None else 1.0
        return self.trace.num_gpus * self.trace.nodes * fraction


@mypyc_attr(allow_interpreted_subclasses=True)  # tests subclass it (when compiled: ``_native``)
class Simulator:
    """Replays ``jobs`` on ``cluster`` under ``policy`` (module doc); one run per instance."""

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        cluster: ClusterSpec,
        policy: SimPolicy,
        config: SimConfig | None = None,
        progress: ProgressFn | None = None,
    ) -> None:
        self.policy = policy
        self._report = progress  # called every ``PROGRESS_EVERY`` s of wall time, and at the end
        self._finished = 0
        self.config = config or SimConfig()
        self.cluster = cluster
        views = cluster.node_views()
        gpus_per_node = max((len(v.gpus) for v in views), default=1) or 1
        memory = {v.name: v.gpus[0].memory_total for v in views if v.gpus}
        self._gpu_memory = max(memory.values(), default=0)
        self._partition: dict[str, str] = {}
        if policy.partition:
            views = self._partitioned(views, jobs)
        self._nodes: dict[str, NodeView] = {v.name: v for v in views}
        self._gpus: dict[str, list[GpuView]] = {v.name: list(v.gpus) for v in views}
        self._uuid_index = {g.uuid: (v.name, g.index) for v in views for g in v.gpus}
        self._flips: dict[tuple[int, int], tuple[GpuView, GpuView]] = {}  # see ``_change``
        self._states: dict[GpuView, GpuView] = {}  # ... one view per state of a whole GPU
        self.total_gpus = float(sum(len(v.gpus) for v in views))
        self._jobs: list[_Job] = []
        if self.config.seed:
            jobs = _shuffle_ties(jobs, self.config.seed)
        for number, trace in enumerate(jobs, start=1):
            trace = as_gang(trace, gpus_per_node)
            job = _Job(trace, self._request(number, trace), trace.duration)
            job.priority, job.klass = job.request.priority, (trace.queue, job.gpus)
            self._jobs.append(job)
        self._of_class: dict[tuple[str, float], list[int]] = {}  # siblings: numbers by class
        self._swept: dict[int, _Job] = {}  # siblings: active jobs whose job before them
        # (``before``) is active too, by number, in arrival order
        self._queues = self._queue_policy(jobs)
        self._history: UsageHistory | None = None
        if self._queues is not None:
            self._history = UsageHistory(half_life=self._queues.config.fair_share.half_life)
        self._tick_at = math.inf
        # this run's cycles reuse each other's work, and plugins learn across them, as live
        self._session = SchedulerSession(learn=True)
        profile = policy.profile(lambda job_id: self._jobs[job_id - 1].trace.duration)
        self._profile = replace(  # a plugin with nothing to compute for any job: no call per cycle
            profile,
            pre_scorers=tuple(
                p for p in profile.pre_scorers if any(p.relevant(j.request) for j in self._jobs)
            ),
        )
        self._estimator = RemainingEstimator(whole_node=gpus_per_node)  # see its docstring
        self._fresh: list[_Job] = []  # dynamic priorities: jobs pending since the last cycle
        self._seen_changes = -1  # the estimator's ``changes`` at the last full refresh
        self._versions: dict[tuple[str, float], int] = {}  # this cycle's, by class (``_version``)
        self._ranks: dict[tuple[object, ...], tuple[float, float]] = {}  # see ``_remaining``
        self._due: float | None = None  # earliest refresh of a running job; None: to be found
        self._heap: list[tuple[float, int, int, int, int]] = []  # (time, kind, seq, job, version)
        self._seq = 0
        self._allocated = 0.0
        self._by_queue: dict[str, float] = {}
        self._first_gpus: dict[str, tuple[int, ...]] = {}
        self.record = RunRecord(
            policy=policy.name,
            description=policy.description,
            oracle=policy.oracle,
            total_gpus=self.total_gpus,
            entitled=self._entitled(jobs),
        )

    def first_placements(self) -> dict[str, tuple[int, ...]]:
        """The GPU indices each started job got when it first started, by trace job id."""
        return dict(self._first_gpus)

    # ── setup ────────────────────────────────────────────────────────────

    def _request(self, number: int, trace: TraceJob) -> JobRequest:
        memory = None
        if trace.gpu_fraction is not None and trace.num_gpus > 0:
            memory = max(1, int(trace.gpu_fraction * self._gpu_memory))
        queue = trace.queue if self.policy.queues else "default"
        selector: tuple[tuple[str, str], ...] = ()
        if self.policy.partition:
            selector = parse_selector({PARTITION_LABEL: _label(trace.queue)})
        return JobRequest(
            id=number,
            gpus=trace.num_gpus,
            submitted_at=trace.submit_time,
            gpu_memory=memory,
            gpu_model=trace.gpu_model,
            priority=trace.priority
            if self.policy.priority == "static" and not self.policy.strict
            else 0,
            queue=queue,
            nodes=trace.nodes,
            cpus=trace.cpus,
            max_runtime=trace.max_runtime,
            node_selector=selector,
        )

    def _queue_policy(self, jobs: Sequence[TraceJob]) -> QueuePolicy | None:
        """The declared queues; when none is declared, one queue per trace queue in one
        cohort, each guaranteed an equal share of the GPUs (lent while unused, and
        reclaimed when its queue needs it)."""
        if not self.policy.queues:
            return None
        config = self.cluster.queues
        if config is None or not config.queues:
            names = sorted({j.queue for j in jobs})
            shares = _largest_remainder([1.0] * len(names), int(self.total_gpus))
            queues = [
                {"name": n, "cohort": "sim", "guarantee": {"gpus": g}}
                for n, g in zip(names, shares, strict=True)
            ]
            config = QueuesConfig.model_validate({"cohorts": ["sim"], "queues": queues})
        return QueuePolicy.build(config)

    def _entitled(self, jobs: Sequence[TraceJob]) -> dict[str, float]:
        """Each queue's entitled share: its guarantee, or equal shares when none is declared."""
        raw = self._entitled_raw(jobs)
        total = sum(raw.values())
        return {name: value / total for name, value in raw.items()} if total > 0 else {}

    def _partitioned(
        self, views: tuple[NodeView, ...], jobs: Sequence[TraceJob]
    ) -> tuple[NodeView, ...]:
        """Static partitions: whole nodes per queue, in proportion to entitlement."""
        shares = self._entitled_raw(jobs)
        names = sorted(shares)
        counts = _largest_remainder([shares[n] for n in names], len(views))
        labelled: list[NodeView] = []
        ordered = iter(sorted(views, key=lambda v: v.name))
        for name, count in zip(names, counts, strict=True):
            for _ in range(count):
                view = next(ordered)
                labels = tuple(sorted((*view.labels, (PARTITION_LABEL, _label(name)))))
                labelled.append(replace(view, labels=labels))
                self._partition[view.name] = name
        labelled.extend(ordered)
        return tuple(labelled)

    def _entitled_raw(self, jobs: Sequence[TraceJob]) -> dict[str, float]:
        """Declared guarantees in GPUs, or 1 per trace queue when the cluster declares none."""
        config = self.cluster.queues
        if config and config.queues:
            return {q.name: float(q.guarantee.gpus or 0) for q in config.queues}
        return {name: 1.0 for name in sorted({j.queue for j in jobs})}

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
        nodes = tuple(self._nodes.values())
        refused: dict[tuple[object, ...], bool] = {}  # by what ``never_fits`` reads of a job
        for number, job in enumerate(self._jobs, start=1):
            r = job.request
            key = (r.nodes, r.gpus, r.gpu_model, r.gpu_memory if r.shared else None)
            never = refused.get(key)
            if never is None:
                never = refused[key] = never_fits(r, nodes) is not None
            if never:
                job.state = "skipped"
                self.record.skipped_jobs += 1
                continue
            self._push(job.trace.submit_time, ARRIVE, number, 0)
        if self.policy.siblings:
            self._sweeps()
        self._note_usage(0.0)
        pending: dict[int, _Job] = {}
        running: dict[int, _Job] = {}
        interval = self.config.cycle_interval
        horizon = self.config.horizon
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
            if changed and pending:
                self._cycle(now, pending, running)
                if self.policy.dynamic and pending and running:
                    self._schedule_tick(now, running)
        self.record.horizon = now
        self.record.sim_seconds = time.perf_counter() - started
        if self._report is not None:
            self._report(Progress(now, self._finished, total, self.record.sim_seconds, True))
        self.record.jobs = [self._job_record(j) for j in self._jobs if j.state != "skipped"]
        return self.record

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
            queueing=self.policy.queueing,
            explain=False,  # the simulator reads no pending reasons
            session=self._session,
        )
        self._apply(plan, now, pending, running)

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

    # ── job transitions ──────────────────────────────────────────────────

    def _start(self, job: _Job, parts: tuple[Placement, ...], now: float) -> None:
        job.state, job.parts, job.attempt_start = "running", parts, now
        job.version += 1
        job.running_views = ()
        if job.first_start is None:
            job.first_start = now
            indices = [self._uuid_index[u][1] for part in parts for u in part.gpu_uuids]
            self._first_gpus[job.trace.job_id] = tuple(sorted(indices))
        for part in parts:
            self._change(part, job.request, +1)
        self._note_usage(now, job, +1)
        self._push(now + job.remaining, FINISH, job.request.id, job.version)

    def _finish(self, job: _Job, at: float) -> None:
        self._finished += 1
        self._progress(job, at)
        job.remaining = 0.0
        job.state, job.end = "done", at
        self._release(job, at)
        siblings = self.policy.siblings
        submitted = job.trace.submit_time if siblings else None  # siblings read submit times
        self._estimator.record(job.trace.queue, job.gpus, job.ran, submitted)
        if siblings:
            self._swept.pop(job.request.id, None)
            self._unhold(job)
            self._new_sibling(job)

    def _stop(self, job: _Job, preemptor: int, now: float) -> None:
        self._progress(job, now)
        job.remaining += self.config.restart_overhead
        job.preemptions += 1
        self.record.preemptions += 1
        job.state, job.preempted_for = "stopping", preemptor
        job.version += 1
        job.running_views = ()
        self._push(now + self.config.preempt_grace, RELEASED, job.request.id, job.version)

    def _progress(self, job: _Job, now: float) -> None:
        ran = max(0.0, now - job.attempt_start)
        job.remaining = max(0.0, job.remaining - ran)
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

    # ── capacity ─────────────────────────────────────────────────────────

    def _change(self, part: Placement, request: JobRequest, sign: int) -> None:
        """The part's node with its GPUs taken (``sign`` 1) or let go (-1): a new ``NodeView``.

        A whole GPU only goes back and forth between two states, so each flip
        is made once with ``GpuView.with_job``, kept as one view per state
        (``_states``), and then looked up (``_flips``: by the identity of the
        view it flips, holding that view).
        """
        gpus = self._gpus[part.node]
        share = part.memory_per_gpu
        flips = self._flips
        for uuid in part.gpu_uuids:
            index = self._uuid_index[uuid][1]
            gpu = gpus[index]
            if share is not None:
                gpus[index] = gpu.with_job(share, sign)
                continue
            known = flips.get((id(gpu), sign))
            if known is None or known[0] is not gpu:
                after = gpu.with_job(None, sign)
                after = self._states.setdefault(after, after)
                known = flips[id(gpu), sign] = (gpu, after)
            gpus[index] = known[1]
        view = self._nodes[part.node]
        used = view.used_cpus + sign * (request.cpus or 0.0) if view.cpus is not None else 0.0
        self._nodes[part.node] = _with_gpus(view, tuple(gpus), max(0.0, used))

    def _running_views(self, running: dict[int, _Job]) -> list[RunningJob]:
        views: list[RunningJob] = []
        extend = views.extend
        for job in running.values():
            own = job.running_views
            if not own:  # a gang holds GPUs on several nodes: one entry per node
                parts = job.parts
                own = job.running_views = (
                    (_running_view(job, parts[0]),)
                    if len(parts) == 1
                    else tuple([_running_view(job, p) for p in parts])
                )
            extend(own)
        return views

    # ── dynamic priorities ───────────────────────────────────────────────

    def _reprioritize(self, now: float, pending: dict[int, _Job], running: dict[int, _Job]) -> None:
        """Refresh remaining-time priorities that may have moved by a step (about 1%).

        A pending job's attained time stands still, so its priority is
        recomputed only when it arrives or returns to pending and when what
        the estimator learnt about its class changes (its ``version``). A
        running job's is recomputed at most every ``REPRIORITIZE_EVERY``
        seconds or 1% of its remaining time, whichever is longer, as a live
        scheduler refreshes priorities periodically rather than every second.
        Sets ``_due``: the earliest next refresh of a running job.
        """
        fresh, self._fresh = self._fresh, []
        versions, srtf = self._versions, self.policy.priority == "srtf"
        versions.clear()  # versions move only when jobs finish, between cycles
        self._ranks.clear()  # so do ranks: this cycle's, by class and attained time
        if self._estimator.changes != self._seen_changes:  # some class learnt: check them all
            self._seen_changes = self._estimator.changes
            fresh = list(pending.values())
        unranked = -math.inf
        for job in fresh:
            if job.state != "pending":
                continue
            known = 0 if srtf else versions.get(job.klass)  # ``_version``, inlined
            version = self._version(job) if known is None else known
            if job.reprioritize_at == unranked or version != job.rank_version:
                self._set_priority(job, now, self._remaining(job, job.ran, version))
            if job.request.priority != job.priority:  # a running job's request is left stale
                job.request = _with_priority(job.request, job.priority)
        margin = self.policy.hysteresis
        due = math.inf
        for job in running.values():
            if job.state != "running":
                continue
            if now >= job.reprioritize_at:
                ran = job.ran + (now - job.attempt_start)
                known = 0 if srtf else versions.get(job.klass)  # ``_version``, inlined
                version = self._version(job) if known is None else known
                if (
                    not srtf
                    and version == job.rank_version
                    and job.rank_from <= ran < job.rank_until
                ):
                    remaining = job.rank  # ``_remaining``'s kept rank, inlined
                else:
                    remaining = self._remaining(job, ran, version)
                remaining /= margin
                # ``_set_priority``, inlined: this runs for about every running job every cycle
                step = 0.01 * remaining
                job.reprioritize_at = now + (
                    step if step > REPRIORITIZE_EVERY else REPRIORITIZE_EVERY
                )
                if remaining != job.ranked_as:
                    job.ranked_as = remaining
                    priority = remaining_priority(remaining)
                    if priority != job.priority:
                        job.priority, job.running_views = priority, ()
            if job.reprioritize_at < due:
                due = job.reprioritize_at
        self._due = due

    # ── sweeps and siblings (``SimPolicy.siblings``) ───────────────────────────

    def _sweeps(self) -> None:
        """Link each job to the one before it in its sweep, and list each class's jobs.

        A *sweep* is a run of jobs of one class (queue and GPU count) each submitted
        at most ``SWEEP_GAP`` seconds after the one before it: a burst, as a user
        submitting a hyper-parameter sweep makes. Jobs go by submission, then number
        (the order they arrive in), so the job before another always arrives first.
        """
        last: dict[tuple[str, float], _Job] = {}
        jobs = [job for job in self._jobs if job.state != "skipped"]
        for job in sorted(jobs, key=lambda j: (j.trace.submit_time, j.request.id)):
            of_class = self._of_class.setdefault(job.klass, [])
            job.place = len(of_class)
            of_class.append(job.request.id)
            previous = last.get(job.klass)
            if previous is not None and job.trace.submit_time - previous.trace.submit_time <= (
                SWEEP_GAP
            ):
                job.before, previous.after = previous.request.id, job.request.id
            last[job.klass] = job

    def _hold_sweeps(self) -> None:
        """Keep each sweep in submission order: the priority the scheduler sees for a job
        is at most that of the job before it in its sweep, while that one is pending,
        running or stopping. Equal priorities go by submission, and a preemptor must
        rank strictly higher, so a job never overtakes or preempts an earlier job of its
        sweep; and a job whose predecessor has run long without finishing ranks no
        better than it (sweeps' run times are alike), before any of them has finished.
        """
        jobs = self._jobs
        shown: dict[int, int] = {}
        for number, job in self._swept.items():  # in arrival order: the job before first
            priority = job.priority
            held = shown.get(job.before)
            if held is None:  # the job before it is the first of those active in its sweep
                held = jobs[job.before - 1].priority
            if held < priority:
                priority = held
            shown[number] = priority
            if job.state != "pending":
                self._show(job, priority)
            elif job.request.priority != priority:  # ``_show`` of a pending job, inlined
                job.request = _with_priority(job.request, priority)

    @staticmethod
    def _show(job: _Job, priority: int) -> None:
        """Let the scheduler see ``priority`` for ``job``: a pending job's request carries
        it, a running or stopping job's snapshot entries (``shown``)."""
        if job.state == "pending":
            if job.request.priority != priority:
                job.request = _with_priority(job.request, priority)
        elif (job.priority if job.shown is None else job.shown) != priority:
            job.shown = priority
            job.running_views = ()

    def _unhold(self, done: _Job) -> None:
        """``done`` finished: the job after it in its sweep is no longer held by it, and
        shows its own priority again (the jobs after that one follow at the next cycle)."""
        job = self._jobs[done.after - 1] if done.after else None
        if job is None or self._swept.pop(job.request.id, None) is None:
            return
        self._show(job, job.priority)
        job.shown = None  # its own priority; also for a pending job, which may run again

    def _new_sibling(self, done: _Job) -> None:
        """``done`` finished: the active jobs of its class submitted within ``SIBLING_GAP``
        of it may have a new close sibling; those that do are ranked again."""
        numbers = self._of_class[done.klass]
        submitted, at = done.trace.submit_time, done.place
        for step, end in ((-1, -1), (1, len(numbers))):
            for i in range(at + step, end, step):
                job = self._jobs[numbers[i] - 1]
                if abs(job.trace.submit_time - submitted) > SIBLING_GAP:
                    break
                if job.state not in _ACTIVE:
                    continue
                queue, gpus = job.klass  # no ``*`` (see ``_run``)
                sibling = self._estimator.sibling(queue, gpus, job.trace.submit_time)
                if sibling != job.sibling:
                    job.sibling, job.rank_version = sibling, -1
                    if job.state == "pending":
                        self._fresh.append(job)
                    else:
                        job.reprioritize_at = -math.inf

    def _version(self, job: _Job) -> int:
        """Changes whenever a job's remaining time may have changed at a fixed attained time
        (the estimator's ``version`` of its class, read once per cycle)."""
        if self.policy.priority == "srtf":
            return 0  # the true remaining time depends on the attained time only
        version = self._versions.get(job.klass)
        if version is None:
            queue, gpus = job.klass  # no ``*`` (see ``_run``)
            version = self._versions[job.klass] = self._estimator.version(queue, gpus)
        return version

    def _remaining(self, job: _Job, ran: float, version: int) -> float:
        """The job's remaining time after ``ran`` seconds of service: true (``srtf``) or
        the estimator's, which is kept with the attained times it holds for and read
        again only outside them or once its class's ``version`` has moved.

        Within a cycle the estimator stands still, so jobs of one class with the
        same attained time (common: starts and stops fall on cycle boundaries)
        share one reading (``_ranks``, emptied every cycle)."""
        if self.policy.priority == "srtf":
            job.rank_version = version
            return job.trace.duration - min(ran, job.trace.duration)
        if version != job.rank_version or not job.rank_from <= ran < job.rank_until:
            key = (job.klass, ran, job.sibling)
            found = self._ranks.get(key)
            if found is None:
                queue, gpus = job.klass  # no ``*`` (see ``_run``)
                found = self._ranks[key] = self._estimator.ranked(queue, gpus, ran, job.sibling)
            job.rank, job.rank_until = found
            job.rank_from, job.rank_version = ran, version
        return job.rank

    def _set_priority(self, job: _Job, now: float, remaining: float) -> None:
        """``job.priority`` from ``remaining``; a changed priority drops its snapshot entries
        (a pending job's request is brought up to it by the caller). ``_reprioritize``
        inlines it for running jobs: a change here goes there too (a test compares both)."""
        job.reprioritize_at = now + max(REPRIORITIZE_EVERY, 0.01 * remaining)
        if remaining != job.ranked_as:  # the priority is a function of the remaining time
            job.ranked_as = remaining
            priority = remaining_priority(remaining)
            if priority != job.priority:
                job.priority = priority
                job.running_views = ()

    # ── bookkeeping ──────────────────────────────────────────────────────

    def _push(self, at: float, kind: int, number: int, version: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, kind, self._seq, number, version))

    def _note_usage(self, at: float, job: _Job | None = None, sign: int = 0) -> None:
        if job is not None:
            self._allocated += sign * job.gpus
            queue = job.trace.queue
            self._by_queue[queue] = self._by_queue.get(queue, 0.0) + sign * job.gpus
            self._point(self.record.queue_share.setdefault(queue, []), at, self._by_queue[queue])
        self._point(self.record.utilization, at, max(0.0, self._allocated))

    @staticmethod
    def _point(series: list[tuple[float, float]], at: float, value: float) -> None:
        if series and series[-1][0] == at:
            series[-1] = (at, value)
        elif not series or series[-1][1] != value:
            series.append((at, value))

    def _job_record(self, job: _Job) -> JobRecord:
        return JobRecord(
            job_id=job.trace.job_id,
            queue=job.trace.queue,
            submit=job.trace.submit_time,
            duration=job.trace.duration,
            gpus=job.gpus,
            start=job.first_start,
            end=job.end,
            preemptions=job.preemptions,
            service=job.service,
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


def _shuffle_ties(jobs: Sequence[TraceJob], seed: int) -> list[TraceJob]:
    """``jobs`` with each group submitted at the same instant shuffled (seeded)."""
    rng = random.Random(seed)
    out: list[TraceJob] = []
    group: list[TraceJob] = []
    for job in [*jobs, None]:
        if job is None or (group and job.submit_time != group[0].submit_time):
            rng.shuffle(group)
            out.extend(group)
            group = []
        if job is not None:
            group.append(job)
    return out


def _running_view(job: _Job, part: Placement) -> RunningJob:
    """The snapshot entry of a running (or stopping) job's ``part``, as the store shows it.

    Positional, without keyword matching: a long replay makes one per priority change
    of a running job, over a million (compiled, ``RunningJob`` is a native class and
    this is a C call). A test pins it to the keyword form, field by field."""
    request = job.request
    return RunningJob(
        request.id,
        request.queue,
        job.priority if job.shown is None else job.shown,  # not ``request``'s
        part.node,
        part.gpu_uuids,
        part.memory_per_gpu,
        job.attempt_start,
        request.submitted_at,
        request.max_runtime,
        None,
        True,
        job.state == "stopping",
        job.preempted_for,
        "",
        request.cpus,
    )


def _with_gpus(view: NodeView, gpus: tuple[GpuView, ...], used_cpus: float) -> NodeView:
    """``replace(view, gpus=gpus, used_cpus=used_cpus)``, without ``dataclasses.replace``'s
    introspection (a Plan's every start and end makes one). A test pins it to ``replace``."""
    v = view
    return NodeView(
        v.name, gpus, v.available, v.unavailable_reason, v.labels, v.taints, v.cpus, used_cpus
    )


def _with_priority(request: JobRequest, priority: int) -> JobRequest:
    """``replace(request, priority=priority)`` without ``dataclasses.replace``, which
    introspects the fields on every call: dynamic policies change hundreds of thousands of
    priorities in a long replay. A test pins it to ``replace``."""
    r = request
    return JobRequest(
        r.id,
        r.gpus,
        r.submitted_at,
        r.gpu_memory,
        r.gpu_model,
        priority,
        r.queue,
        r.user,
        r.nodes,
        r.cpus,
        r.max_runtime,
        r.can_preempt,
        r.node_selector,
        r.tolerations,
        r.topology,
    )


def _label(queue: str) -> str:
    """A queue name as a label value (labels allow fewer characters than queue names)."""
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-" for c in queue)[:63].strip("-_.")
    return cleaned or "q"


def _largest_remainder(weights: Sequence[float], total: int) -> list[int]:
    """Split ``total`` whole units in proportion to ``weights``; sums to ``total`` exactly."""
    weight_sum = sum(weights)
    if weight_sum <= 0:
        weights, weight_sum = [1.0] * len(weights), float(len(weights))
    exact = [w * total / weight_sum for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts
