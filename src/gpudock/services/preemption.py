"""What the scheduler's preemption rules say about one job now, for ``gpudock show``.

The same ``PreemptionRules`` the scheduler runs (``scheduler/preemption_rules.py``,
from the server's ``scheduler.preemption``) read the job as the snapshot would
show it: when its protection after its last (re)start ends, and what a restart
would be charged. Pure: no I/O; the caller passes the time.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudock.core.job import Job
from gpudock.scheduler.preemption_rules import PreemptionRules
from gpudock.scheduler.snapshot import RunningJob


@dataclass(frozen=True, slots=True)
class Protection:
    """``preemptible``: the job may ever be preempted (``preemptible: false`` may not).
    ``protected_until``: its protection ends then (epoch seconds; None when it is not
    protected now). ``restart_cost``: seconds a restart would be charged now, and
    ``lost_work`` of it the run since its last checkpoint."""

    preemptible: bool
    protected_until: float | None
    protected_for: float | None
    restart_cost: float
    lost_work: float


def protection_of(job: Job, rules: PreemptionRules, now: float) -> Protection | None:
    """The rules' view of ``job`` at ``now``; None unless it holds GPUs (a pending job
    has nothing to protect)."""
    if not job.state.holds_resources:
        return None
    spec = job.spec
    start = None
    if job.allocated_at is not None and job.started_at is not None:
        start = max(0.0, job.started_at - job.allocated_at)
    view = RunningJob(
        id=job.id,
        queue=spec.queue,
        priority=spec.priority,
        node=job.node or "",
        gpu_uuids=job.gpu_uuids,
        memory_per_gpu=job.gpu_memory_per_gpu,
        started_at=job.started_at,
        submitted_at=job.submitted_at,
        max_runtime=spec.max_runtime,
        min_runtime=spec.min_runtime,
        preemptible=spec.preemptible,
        restart_cost=spec.restart_cost,
        checkpoint_interval=spec.checkpoint_interval,
        start_seconds=start,
    )
    until = rules.protected_until(view) if spec.preemptible else None
    return Protection(
        preemptible=spec.preemptible,
        protected_until=until if until is not None and until > now else None,
        protected_for=rules.protected_for(view),
        restart_cost=rules.restart_cost_of(view),
        lost_work=rules.lost_work(view, now),
    )
