"""The controller owns the server's background loops.

* the scheduling loop wakes on ``ctx.wake_scheduler`` (a submit, a finished
  job, a node coming back) or every ``schedule_interval``, and runs
  snapshot → ``schedule`` → applier → launch;
* the reconcile loop runs ``reconcile`` every ``reconcile_interval``, or at
  once when ``ctx.wake_reconciler`` is set;
* the event loop (executors with events) reconciles the one job whose
  container starts, dies or disappears (``reconcile_container``) as the
  event arrives, so a finished job frees its GPUs in milliseconds rather
  than at the next pass; an event it cannot match (an orphan, an engine
  that stopped answering) sets ``wake_reconciler`` for a full pass.

Decisions (``schedule``) never touch I/O; side effects (Docker calls) run in
the context's worker pool, outside any database transaction.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from gpudock.core.job import PendingReason
from gpudock.core.mounts import staging_notice
from gpudock.executors.base import EventStream, ExecutorUnavailable, ExecutorWithEvents
from gpudock.gpus.node_monitor import NodeGpuMonitor
from gpudock.queue import UsageHistory
from gpudock.runtime import launcher
from gpudock.runtime.cluster import ClusterWatcher
from gpudock.runtime.context import RuntimeContext
from gpudock.runtime.event_pruner import EventPruner
from gpudock.runtime.gating import gate_snapshot
from gpudock.runtime.reconciler import reconcile, reconcile_container
from gpudock.scheduler.admission import queue_usage
from gpudock.scheduler.cycle import schedule
from gpudock.scheduler.elastic import may_grow
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import ReservedGpus, Snapshot
from gpudock.store import jobs as job_store
from gpudock.store import published
from gpudock.store.applier import ApplyResult, apply_plan
from gpudock.store.db import database_unavailable
from gpudock.store.snapshot import SnapshotCache

log = logging.getLogger("gpudock.controller")

MAX_PENDING_PER_CYCLE = 5000
GPU_PENDING_PER_CYCLE = 1000
"""Pending jobs asking for GPUs that a cycle also considers beyond its first
``MAX_PENDING_PER_CYCLE`` (``store.snapshot.load_snapshot``'s ``gpu_share``)."""


def backlog_reason(window: int, gpu_share: int) -> PendingReason:
    """Why a job beyond a cycle's window of ``window`` pending jobs (and its
    ``gpu_share`` GPU jobs further back) waits."""
    return PendingReason(
        "backlog",
        f"not considered yet: the scheduler looks at the first {window} pending jobs "
        f"(by priority, then submit time) each cycle, and at the first {gpu_share} "
        "further back that ask for GPUs; this one is further back",
        f"it is considered once fewer than {window} pending jobs are ahead of it",
    )


class Controller:
    """The server's background loops, and the node's GPU monitor (``monitor``:
    started after the first reconcile, stopped first)."""

    def __init__(self, ctx: RuntimeContext, monitor: NodeGpuMonitor | None = None) -> None:
        self.ctx = ctx
        self.monitor = monitor
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._events: EventStream | None = None
        self._history: UsageHistory | None = None  # fair-share usage, advanced every cycle
        self._history_saved = 0.0
        self._reservations: tuple[ReservedGpus, ...] | None = None  # as last published
        self._snapshots = SnapshotCache()  # consecutive snapshots share unchanged objects
        self._db_failures = 0  # consecutive steps that failed on an unreachable database
        self._outage_lock = threading.Lock()
        self._pruner = EventPruner()  # the event log's age and count bounds
        # what each cycle reuses of the last one's work; plugins learn across cycles (the
        # job mix share prices follow), as a live cluster should
        self._session = SchedulerSession(learn=True)
        self._watcher: ClusterWatcher | None = None

    def start(self) -> None:
        """Start the GPU monitor (the node's sharing mode is known and its event
        registration done when it returns, before any launch), say whether mounts can
        be staged, and on a multi-node engine start the cluster watcher
        (``runtime/cluster.py``); reconcile once (adopt what survived a restart), then
        start the loops."""
        if self.monitor is not None:
            self.monitor.start()
            self.ctx.gpu_watchdog = self.monitor.watching
        notice = staging_notice(
            self.ctx.executor.mount_problem(), self.ctx.config.executor.allowed_mounts
        )
        if notice is not None and self.ctx.executor.binds_mounts:
            writable = any(e.mode == "rw" for e in self.ctx.config.executor.allowed_mounts)
            log.log(logging.WARNING if writable else logging.INFO, "%s", notice)
        if self.ctx.cluster:
            self._watcher = ClusterWatcher(self.ctx, lambda fn: self._safe(fn, self.ctx))
            self._watcher.start()
        self._safe(reconcile, self.ctx)
        loops = [("schedule", self._schedule_loop), ("reconcile", self._reconcile_loop)]
        if isinstance(self.ctx.executor, ExecutorWithEvents):
            loops.append(("events", self._event_loop))
        loops.append(("prepare", self._prepare))  # e.g. a solver's import, off the first cycle
        for name, target in loops:
            thread = threading.Thread(target=target, name=f"gpudock-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.ctx.wake_scheduler.set()

    def stop(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        self._stop.set()
        if self._watcher is not None:
            self._watcher.stop()
        self.ctx.wake_scheduler.set()
        self.ctx.wake_reconciler.set()
        if self._events is not None:
            self._events.close()
        for thread in self._threads:
            thread.join(timeout=10)
        self.ctx.shutdown()

    def schedule_once(self) -> ApplyResult:
        """One cycle: snapshot → schedule → apply → launch what was allocated."""
        ctx, started = self.ctx, time.perf_counter()
        limit, gpu_share = MAX_PENDING_PER_CYCLE, GPU_PENDING_PER_CYCLE
        with ctx.db.read() as session:
            ctx.sync(session)  # the config in force, wherever it was applied
            snapshot = self._snapshots.load(session, ctx.clock(), limit, gpu_share)
        window = snapshot.pending  # the first `limit` in the scheduler's order, then GPU jobs
        snapshot = gate_snapshot(ctx, snapshot)  # dependencies and array limits
        snapshot = ctx.snapshot = self._with_history(snapshot)  # published for /metrics
        if not snapshot.pending and not any(map(may_grow, snapshot.running)):
            self._publish(())
            return ApplyResult()
        plan = schedule(snapshot, ctx.config.scheduler, session=self._session)
        self._publish(tuple(plan.reservations))  # for GET /v1/gpus, from any API process
        result = apply_plan(ctx.db, plan, ctx.clock())
        if len(window) >= limit:  # there may be more: they say why they wait
            with ctx.db.write() as session:
                reason = backlog_reason(limit, gpu_share)
                job_store.set_backlog_reason(session, window[limit - 1], reason)
        ctx.metrics.cycle_done(time.perf_counter() - started, plan, result)
        gangs = [(g.job_id, any(p.gpu_uuids for p in g.parts)) for g in result.committed_gangs]
        placed = [(p.job_id, bool(p.uuids)) for p in result.committed] + gangs  # a MIG device too
        for job_id, gpus in placed:  # GPU jobs' launches go first in the lane
            launch = functools.partial(launcher.launch, ctx, job_id)
            ctx.run_once("launch", job_id, launch, gpus=gpus)
        if result.rejected:
            ctx.wake_scheduler.set()  # retry on fresh state
        if result.preempted or result.resized:
            ctx.wake_reconciler.set()  # stop the victims (and the jobs to resize) now
        return result

    def _prepare(self) -> None:
        """Let each pre-score plugin load what its first cycle would (``prepare``)."""
        profile = build_profile(self.ctx.config.scheduler)
        for plugin in profile.pre_scorers:
            plugin.prepare(profile)

    def _publish(self, reservations: tuple[ReservedGpus, ...]) -> None:
        """Store the latest plan's reservations for the API processes when they changed."""
        if reservations == self._reservations:
            return
        with self.ctx.db.write() as session:
            published.put_reservations(session, reservations)
        self._reservations = reservations

    def _with_history(self, snapshot: Snapshot) -> Snapshot:
        """Advance the queues' decayed usage to ``snapshot.now``; publish it every
        ``HISTORY_EVERY`` seconds (``store/published.py``), which also keeps it
        across a restart."""
        queues = self.ctx.config.scheduler.queues
        if not queues.queues:
            return snapshot
        if self._history is None:
            with self.ctx.db.read() as session:
                saved = published.get_history(session)
            self._history = saved or UsageHistory(half_life=queues.fair_share.half_life)
        if self._history.half_life != queues.fair_share.half_life:  # a live change applies
            self._history = replace(self._history, half_life=queues.fair_share.half_life)
        self._history = self._history.advance(snapshot.now, queue_usage(snapshot))
        if snapshot.now - self._history_saved >= published.HISTORY_EVERY:
            with self.ctx.db.write() as session:
                published.put_history(session, self._history)
            self._history_saved = snapshot.now
        return replace(snapshot, queue_history=self._history)

    def _schedule_loop(self) -> None:
        """Cycle on each wake-up or every ``schedule_interval``, resting after each cycle.

        The rest is as long as the cycle took (at most ``schedule_interval``), so
        under a stream of wake-ups (a submit storm) scheduling takes at most about
        half of the process's time and the API keeps answering; a wake-up during
        the rest is kept and runs the next cycle as soon as it ends.
        """
        interval = self.ctx.config.schedule_interval
        while not self._stop.is_set():
            self.ctx.wake_scheduler.wait(timeout=interval)
            self.ctx.wake_scheduler.clear()
            if self._stop.is_set():
                return
            started = time.monotonic()
            self._safe(lambda _ctx: self.schedule_once(), self.ctx)
            self._stop.wait(timeout=min(interval, time.monotonic() - started))

    def _reconcile_loop(self) -> None:
        interval = self.ctx.config.reconcile_interval
        while not self._stop.is_set():
            self.ctx.wake_reconciler.wait(timeout=interval)
            self.ctx.wake_reconciler.clear()
            if self._stop.is_set():
                return
            self._safe(reconcile, self.ctx)
            self._safe(self._pruner.maybe_prune, self.ctx)

    def _event_loop(self) -> None:
        """Turn engine events into reconcile wake-ups; reconnect after outages."""
        executor = self.ctx.executor
        assert isinstance(executor, ExecutorWithEvents)
        while not self._stop.is_set():
            try:
                self._events = executor.events()
            except ExecutorUnavailable:
                self._stop.wait(timeout=1.0)
                continue
            self.ctx.wake_reconciler.set()  # catch up on what happened while disconnected
            for event in self._events:
                name, action = event.name, event.action
                settle = functools.partial(reconcile_container, name=name, action=action)
                if not self._safe(settle, self.ctx):
                    self.ctx.wake_reconciler.set()  # not settled here: a full pass
            self._events = None
            self._stop.wait(timeout=0.5)

    def _safe(self, fn: Callable[[RuntimeContext], object], ctx: RuntimeContext) -> object:
        """Run one step of a loop and return what it returned (None when it failed);
        a failure is logged and the loop goes on.

        While the database is down a failing step waits a growing pause (1 s
        doubling to 30 s) before the loop tries again. The outage itself is
        logged once when it starts and once when the database answers again
        (``Database.availability``), never per step and never with a trace.
        """
        try:
            result = fn(ctx)
        except Exception as exc:
            if not database_unavailable(exc):
                log.exception("background step failed; retrying next cycle")
                return None
            ctx.db.availability.failed(exc)
            with self._outage_lock:
                self._db_failures += 1
                pause = min(30.0, 2.0 ** (self._db_failures - 1))
            log.debug("background step deferred (the database is down); next try in %.0f s", pause)
            self._stop.wait(timeout=pause)
            return None
        with self._outage_lock:
            self._db_failures = 0
        return result
