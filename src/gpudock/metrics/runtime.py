"""Counters and histograms for what the server's runtime observes as it happens.

The controller, launcher and finisher call one method each after their own
commit; nothing here touches the store or takes a lock beyond
prometheus-client's own. Labels are bounded: a queue name, a decision
outcome, a stop kind; never a job id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from gpudock.scheduler.snapshot import Plan

if TYPE_CHECKING:
    from gpudock.store.applier import ApplyResult

WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400, 259200)
RUN_BUCKETS = (10, 60, 300, 900, 1800, 3600, 7200, 14400, 28800, 86400, 259200, 604800)
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

# Stop kinds the server itself enforces (a watchdog), as opposed to a user's
# cancel or a scheduler's preemption.
USER_OR_SCHEDULER_STOPS = frozenset({None, "cancel", "preempt", "requeue", "resize"})


class RuntimeMetrics:
    """The event metrics of one server process, on their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        job, sched = "gpudock_job_", "gpudock_scheduler_"
        reg = self.registry
        self.wait = Histogram(
            job + "wait_seconds",
            "Time from submission to RUNNING, per started attempt.",
            ["queue"],
            buckets=WAIT_BUCKETS,
            registry=reg,
        )
        self.run = Histogram(
            job + "run_seconds",
            "Time from RUNNING to the end of the attempt.",
            ["queue"],
            buckets=RUN_BUCKETS,
            registry=reg,
        )
        self.preempted = Counter(
            job + "preemptions", "Attempts ended by preemption (requeued).", ["queue"], registry=reg
        )
        self.retries = Counter(
            job + "retries", "Failed or lost attempts requeued as a retry.", ["queue"], registry=reg
        )
        self.watchdog = Counter(
            job + "watchdog_kills",
            "Attempts the server stopped itself (e.g. reason=max_runtime).",
            ["queue", "reason"],
            registry=reg,
        )
        self.cycle = Histogram(
            sched + "cycle_seconds",
            "Wall time of one scheduling cycle that had pending jobs (snapshot to apply).",
            buckets=CYCLE_BUCKETS,
            registry=reg,
        )
        self.decisions = Counter(
            sched + "decisions",
            "Per-job decisions in plans: outcome=place, preempt or wait.",
            ["outcome"],
            registry=reg,
        )
        self.placements = Counter(
            sched + "placements", "Placements the applier committed.", registry=reg
        )
        self.preemptions = Counter(
            sched + "preemptions", "Victims the applier asked to stop.", registry=reg
        )
        self.conflicts = Counter(
            sched + "plan_conflicts",
            "Placements the applier rejected because the store changed since the snapshot.",
            registry=reg,
        )
        self.strays = Counter(
            "gpudock_gpu_stray_processes",
            "Processes of no gpudock job found on a GPU a job holds (killed=true|false).",
            ["node", "killed"],
            registry=reg,
        )
        self.faults = Counter(
            "gpudock_gpu_faults",
            "GPU health events: kind=xid|ecc_uncorrected|ecc_corrected|lost, "
            "class=application|gpu_reset|node|info.",
            ["node", "kind", "class"],
            registry=reg,
        )

    def job_started(self, queue: str, submitted_at: float, started_at: float) -> None:
        """An attempt reached RUNNING."""
        self.wait.labels(queue).observe(max(0.0, started_at - submitted_at))

    def attempt_ended(
        self,
        queue: str,
        started_at: float | None,
        ended_at: float,
        stop_requested: str | None,
        retried: bool,
    ) -> None:
        """An attempt that held GPUs ended (terminal, or requeued)."""
        if started_at is not None:
            self.run.labels(queue).observe(max(0.0, ended_at - started_at))
        if stop_requested == "preempt":
            self.preempted.labels(queue).inc()
        elif stop_requested not in USER_OR_SCHEDULER_STOPS:
            self.watchdog.labels(queue, stop_requested).inc()
        if retried:
            self.retries.labels(queue).inc()

    def gpu_stray(self, node: str, killed: bool) -> None:
        """The GPU watchdog found a process of no job on a job's GPU."""
        self.strays.labels(node, str(killed).lower()).inc()

    def gpu_fault(self, node: str, kind: str, fault_class: str) -> None:
        """A GPU health event (``gpus/xid.py``)."""
        self.faults.labels(node, kind, fault_class).inc()

    def cycle_done(self, seconds: float, plan: Plan, result: ApplyResult) -> None:
        """One scheduling cycle: its plan and what the applier made of it."""
        self.cycle.observe(seconds)
        self.decisions.labels("place").inc(len(plan.placements))
        self.decisions.labels("preempt").inc(len(plan.preemptions))
        self.decisions.labels("wait").inc(len(plan.pending))
        self.placements.inc(len(result.committed))
        self.preemptions.inc(len(result.preempted))
        self.conflicts.inc(len(result.rejected))
