"""Turn a finished (or vanished) container into the job's final state.

Order matters for crash safety: logs are archived first, then the job's
state changes (which frees its GPUs), and only then is the container
removed. A container is therefore never removed while its job could still be
relaunched, and a crash in between leaves an orphan the reconciler removes.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path

from gpudock.core.job import Job, JobState
from gpudock.core.units import format_duration, format_size
from gpudock.executors.base import ContainerStatus, ExecutorUnavailable
from gpudock.runtime.context import RuntimeContext
from gpudock.store import jobs as job_store

log = logging.getLogger("gpudock.finisher")


def log_file(ctx: RuntimeContext, job_id: int, attempt: int) -> Path:
    return ctx.log_dir / f"job-{job_id}" / f"attempt-{attempt}.log"


def archive_logs(ctx: RuntimeContext, job_id: int, attempt: int, container: str) -> Path | None:
    """Copy the container's logs to the log dir (overwriting: idempotent)."""
    path = log_file(ctx, job_id, attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        with tmp.open("wb") as out:
            for chunk in ctx.executor.logs(container, follow=False):
                out.write(chunk)
    except ExecutorUnavailable:
        tmp.unlink(missing_ok=True)
        return path if path.exists() else None
    tmp.replace(path)
    return path


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a finished attempt becomes: a terminal state, or PENDING (requeued).

    ``failed_attempt`` is True when a requeue uses up one of the job's retries
    (a failure or a loss); a preemption requeues without using one.
    """

    state: JobState
    reason: str
    failed_attempt: bool = False


def outcome(job: Job, status: ContainerStatus | None) -> Outcome:
    """How the job's current attempt ended, given its container (None if vanished)."""
    spec = job.spec
    if job.stop_requested == "cancel":
        return Outcome(JobState.CANCELLED, f"cancelled by {job.stop_requested_by or 'a user'}")
    if job.stop_requested == "max_runtime":
        limit = format_duration(spec.max_runtime)
        return Outcome(JobState.FAILED, f"exceeded max_runtime of {limit}; stopped")
    if job.stop_requested == "preempt":
        return Outcome(JobState.PENDING, f"preempted by {job.stop_requested_by}; requeued")
    if status is None:
        why = f"container {job.container_name} disappeared while the job was running"
        return _maybe_retry(job, JobState.LOST, why)
    code = status.exit_code
    if code == 0:
        return Outcome(JobState.SUCCEEDED, "exited with code 0")
    if status.oom_killed:
        limit = format_size(spec.memory) if spec.memory else "the memory limit"
        why = f"out of memory: killed after exceeding {limit} (exit code {code})"
    else:
        why = f"exited with code {code}"
        if status.error:
            why += f": {status.error}"
    return _maybe_retry(job, JobState.FAILED, why)


def _maybe_retry(job: Job, state: JobState, why: str) -> Outcome:
    if job.failures < job.spec.retries:
        retry = f"retrying ({job.failures + 1} of {job.spec.retries} retries)"
        return Outcome(JobState.PENDING, f"{why}; {retry}", failed_attempt=True)
    return Outcome(state, why)


def finish(ctx: RuntimeContext, job: Job, status: ContainerStatus | None) -> None:
    """Record how the job's container ended, free its GPUs, remove the container.

    ``job`` may be stale (read before the container was listed): the job is
    re-read, and nothing happens unless it is still the active attempt that
    owns this container. The container is removed only after the job's state
    change committed; otherwise it is left for the next reconcile pass.
    """
    with ctx.db.read() as session:
        fresh = job_store.get_job(session, job.id)
    if fresh is None or not fresh.state.holds_resources or fresh.attempt != job.attempt:
        return
    if fresh.state is not JobState.RUNNING and status is None:
        return  # not started yet: the launcher, not a loss
    job = fresh
    path = None
    if status is not None:
        path = archive_logs(ctx, job.id, job.attempt, status.id)
    result = outcome(job, status)
    target, reason = result.state, result.reason
    fields: dict[str, object] = {}
    if result.failed_attempt:
        fields["failures"] = job.failures + 1
    if target is not JobState.PENDING:
        fields["log_path"] = str(path) if path else None
        if status is not None:
            fields["exit_code"] = status.exit_code
            if status.finished_at:
                fields["finished_at"] = status.finished_at
    with ctx.db.write() as session:
        moved = job_store.transition(
            session, job.id, job.state, target, ctx.clock(), reason=reason, **fields
        )
    if not moved:
        return
    ended = (status.finished_at if status is not None else None) or ctx.clock()
    ctx.metrics.attempt_ended(
        job.spec.queue, job.started_at, ended, job.stop_requested, result.failed_attempt
    )
    log.info("job %s %s: %s", job.id, target.value, reason)
    ctx.wake_scheduler.set()
    if status is not None:
        with contextlib.suppress(ExecutorUnavailable):
            ctx.executor.remove(status.id)  # else the orphan pass removes it later


def stop(ctx: RuntimeContext, job: Job) -> None:
    """Stop the job's container (SIGTERM, then SIGKILL after the grace) and finish it."""
    grace = ctx.config.executor.stop_grace
    if job.container_name is None:
        return  # not started: the reconciler ends it without a container
    try:
        ctx.executor.stop(job.container_name, grace)
        status = ctx.executor.inspect(job.container_name)
    except ExecutorUnavailable:
        return  # retried by the next reconcile
    if status is None or status.finished:
        finish(ctx, job, status)
