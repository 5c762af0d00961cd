"""Turn a finished (or vanished) container into the job's final state.

GPUs first: the job's state change commits first (which frees its GPUs and
wakes the scheduler), then its logs are archived in the ``archive`` lane,
streamed and capped at ``logs.max_bytes`` (the tail is kept), and only then
is the container removed. A container is therefore never removed before its
logs are archived, and a crash in between leaves an orphan that the
reconciler archives and removes (``reconciler._handle_orphan``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gpudock.core.job import Job, JobState
from gpudock.core.units import format_duration, format_size
from gpudock.executors.base import ContainerStatus, EngineTimeout, ExecutorUnavailable
from gpudock.runtime import undescribed
from gpudock.runtime.context import RuntimeContext
from gpudock.store import jobs as job_store

log = logging.getLogger("gpudock.finisher")


def log_file(ctx: RuntimeContext, job_id: int, attempt: int) -> Path:
    return ctx.log_dir / f"job-{job_id}" / f"attempt-{attempt}.log"


def archive_logs(ctx: RuntimeContext, job_id: int, attempt: int, container: str) -> Path | None:
    """Stream the container's logs to the log dir (overwriting: idempotent).

    At most ``logs.max_bytes`` are kept: a longer log keeps its tail, after a
    first line saying how many bytes were cut. Memory stays bounded whatever
    the log's size. An empty stream (the container is gone) never replaces an
    archive made before. Returns the archive, or None when the engine is
    unreachable and nothing was archived before.
    """
    path = log_file(ctx, job_id, attempt)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    cap = ctx.config.logs.max_bytes
    try:
        total = _stream_capped(ctx.executor.logs(container, follow=False), tmp, cap)
    except ExecutorUnavailable:
        tmp.unlink(missing_ok=True)
        return path if path.exists() else None
    if total == 0 and path.exists():
        tmp.unlink(missing_ok=True)  # the container is gone: keep what was archived
        return path
    if total > cap:
        _keep_tail(tmp, cap, note=f"[gpudock] log cut: the first {total - cap} of {total} bytes "
                   f"are not kept (logs.max_bytes is {format_size(cap)})\n")  # fmt: skip
    tmp.replace(path)
    return path


def _stream_capped(chunks: Iterable[bytes], tmp: Path, cap: int) -> int:
    """Write ``chunks`` to ``tmp``, trimming to the last ``cap`` bytes whenever it
    reaches twice that (so the file never holds more than ``2 * cap``). Returns the
    total byte count streamed."""
    total = 0
    held = 0
    with tmp.open("wb") as out:
        for chunk in chunks:
            out.write(chunk)
            total += len(chunk)
            held += len(chunk)
            if held >= 2 * cap:
                out.flush()
                _keep_tail(tmp, cap)
                out.seek(0, 2)
                held = cap
    return total


def _keep_tail(path: Path, cap: int, note: str = "") -> None:
    """Rewrite ``path`` to its last ``cap`` bytes, after ``note``."""
    with path.open("rb") as src:
        src.seek(0, 2)
        src.seek(max(0, src.tell() - cap))
        tail = src.read()
    with path.open("wb") as out:
        out.write(note.encode())
        out.write(tail)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a finished attempt becomes: a terminal state, or PENDING (requeued).

    ``failed_attempt`` is True when a requeue uses up one of the job's retries
    (a failure or a loss); a preemption requeues without using one.
    """

    state: JobState
    reason: str
    failed_attempt: bool = False


def outcome(job: Job, status: ContainerStatus | None, on_fault: str = "requeue") -> Outcome:
    """How the job's current attempt ended, given its container (None if vanished).

    A job the GPU watchdog stopped (``gpu_memory``) failed by its own doing:
    FAILED, or requeued while retries last. One stopped because its GPU was
    quarantined (``gpu_fault``) is requeued without spending a retry, unless
    ``on_fault`` (``gpus.health.on_fault``) is ``fail``.
    """
    spec = job.spec
    if job.stop_requested == "cancel":
        return Outcome(JobState.CANCELLED, f"cancelled by {job.stop_requested_by or 'a user'}")
    if job.stop_requested == "max_runtime":
        limit = format_duration(spec.max_runtime)
        return Outcome(JobState.FAILED, f"exceeded max_runtime of {limit}; stopped")
    if job.stop_requested == "preempt":
        return Outcome(JobState.PENDING, f"preempted by {job.stop_requested_by}; requeued")
    if job.stop_requested == "resize":
        return Outcome(JobState.PENDING, f"restarted by {job.stop_requested_by}; no retry used")
    if job.stop_requested == "requeue":
        return Outcome(JobState.PENDING, f"requeued by {job.stop_requested_by}; no retry used")
    if job.stop_requested == "gpu_memory":
        return maybe_retry(
            job, JobState.FAILED, job.stop_requested_by or "GPU memory limit exceeded"
        )
    if job.stop_requested == "gpu_fault":
        why = f"its GPU was quarantined: {job.stop_requested_by}"
        if on_fault == "fail":
            return maybe_retry(job, JobState.FAILED, why)
        return Outcome(JobState.PENDING, f"{why}; requeued, no retry used")
    if status is None:
        why = f"container {job.container_name} disappeared while the job was running"
        return maybe_retry(job, JobState.LOST, why)
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
    return maybe_retry(job, JobState.FAILED, why)


def maybe_retry(job: Job, state: JobState, why: str) -> Outcome:
    """``state`` with ``why``, or PENDING (a retry) while the job has retries left."""
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
    if job.gang and status is not None and not _rest_of_gang_stopped(ctx, job):
        return  # its GPUs stay held: the next pass tries again
    result = outcome(job, status, ctx.config.gpus.health.on_fault)
    target, reason = result.state, result.reason
    failed = status is not None and status.exit_code not in (0, None) and not job.stop_requested
    if ctx.fault_note is not None and failed:
        note = ctx.fault_note(job.gpu_uuids, job.started_at) if job.gpu_uuids else None
        reason = f"{reason}; {note} during the run" if note else reason
    fields: dict[str, object] = {}
    if result.failed_attempt:
        fields["failures"] = job.failures + 1
    if target is not JobState.PENDING:
        if status is not None:
            fields["log_path"] = str(log_file(ctx, job.id, job.attempt))
            fields["exit_code"] = status.exit_code
            if status.finished_at:
                fields["finished_at"] = status.finished_at
        else:
            fields["log_path"] = None
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
    ctx.wake_scheduler.set()  # its GPUs are free now, before any log is copied
    if status is not None:
        attempt, container = job.attempt, status.id
        ctx.run_once("archive", job.id, lambda: archive_and_remove(ctx, job.id, attempt, container))


def _rest_of_gang_stopped(ctx: RuntimeContext, job: Job) -> bool:
    """A gang ends with its first failing member (or with the last to succeed): the
    members still running are stopped (SIGTERM, grace, SIGKILL) before its GPUs are
    freed, so none is handed on while a member still uses it. False when the engine
    could not be asked (nothing is freed; the next pass tries again)."""
    assert job.container_name is not None
    try:
        ctx.executor.stop(job.container_name, ctx.config.executor.stop_grace)
    except ExecutorUnavailable as exc:
        log.warning("job %s: the rest of its gang not stopped yet: %s", job.id, exc)
        return False
    return True


def archive_and_remove(ctx: RuntimeContext, job_id: int, attempt: int, container: str) -> None:
    """Archive an ended attempt's logs, then remove its container (both idempotent).

    If the engine is unreachable the container stays; the reconciler's orphan
    pass archives and removes it later.
    """
    try:
        archive_logs(ctx, job_id, attempt, container)
        ctx.executor.remove(container)
    except ExecutorUnavailable:
        log.info("job %s: engine unreachable; its container is left to the orphan pass", job_id)


def stop(ctx: RuntimeContext, job: Job, grace: float | None = None) -> None:
    """Stop the job's container (SIGTERM, then SIGKILL after ``grace``, by default
    ``executor.stop_grace``) and finish it.

    A stop or description the engine does not answer in time holds the job
    (``undescribed.engine_late``); the next pass tries again.
    """
    grace = ctx.config.executor.stop_grace if grace is None else grace
    if job.container_name is None:
        return  # not started: the reconciler ends it without a container
    try:
        ctx.executor.stop(job.container_name, grace)
        status = ctx.executor.inspect(job.container_name)
    except EngineTimeout as exc:
        undescribed.engine_late(ctx, job, exc)
        return
    except ExecutorUnavailable:
        return  # retried by the next reconcile
    if status is None or status.finished:
        finish(ctx, job, status)
