"""Start an ALLOCATED job's container: ALLOCATED → STARTING → RUNNING.

Idempotent and crash-safe: STARTING is committed before Docker is touched,
the container name is fixed per attempt, and ``Executor.launch`` adopts a
container that already exists. A server killed at any point and restarted
therefore finishes the launch instead of starting a second container.
"""

from __future__ import annotations

import logging

from gpudock.core.job import Job, JobState, container_name, parse_mount
from gpudock.executors.base import ExecutorUnavailable, LaunchError, LaunchRequest
from gpudock.runtime import node_health
from gpudock.runtime.context import RuntimeContext
from gpudock.store import jobs as job_store

log = logging.getLogger("gpudock.launcher")


def launch(ctx: RuntimeContext, job_id: int) -> None:
    """Bring job ``job_id`` (ALLOCATED or STARTING) to RUNNING, or fail it with a reason."""
    with ctx.db.write() as session:
        job = job_store.get_job(session, job_id)
        if job is None or job.state not in (JobState.ALLOCATED, JobState.STARTING):
            return
        if job.stop_requested:
            return  # the reconciler cancels it without starting anything
        if job.state is JobState.ALLOCATED:
            name = container_name(ctx.instance_id, job.id, job.attempt)
            if not job_store.transition(
                session,
                job_id,
                JobState.ALLOCATED,
                JobState.STARTING,
                ctx.clock(),
                container_name=name,
            ):
                return  # cancelled or requeued meanwhile
            job.state, job.container_name = JobState.STARTING, name
    try:
        status = ctx.executor.launch(build_request(ctx, job))
    except ExecutorUnavailable as exc:
        node_health.mark_engine_down(ctx, exc)
        log.warning("job %s: Docker unreachable; launch resumes when it returns", job_id)
        return
    except LaunchError as exc:
        with ctx.db.write() as session:
            job_store.transition(
                session,
                job_id,
                JobState.STARTING,
                JobState.FAILED,
                ctx.clock(),
                reason=f"could not start container: {exc}",
            )
        ctx.wake_scheduler.set()  # its GPUs are free again
        log.info("job %s failed to start: %s", job_id, exc)
        return
    started_at = status.started_at or ctx.clock()
    with ctx.db.write() as session:
        running = job_store.transition(
            session,
            job_id,
            JobState.STARTING,
            JobState.RUNNING,
            ctx.clock(),
            container_id=status.id,
            started_at=started_at,
        )
    if running:
        ctx.metrics.job_started(job.spec.queue, job.submitted_at, started_at)
    log.info("job %s running in %s on GPUs %s", job_id, job.container_name, ",".join(job.gpu_uuids))


def build_request(ctx: RuntimeContext, job: Job) -> LaunchRequest:
    """The executor request for the job's current attempt and allocation."""
    spec = job.spec
    labels = dict(spec.labels)
    labels.update({"gpudock.user": job.user, "gpudock.queue": spec.queue})
    return LaunchRequest(
        job_id=job.id,
        attempt=job.attempt,
        name=job.container_name or container_name(ctx.instance_id, job.id, job.attempt),
        image=spec.image,
        command=spec.command,
        env=dict(spec.env),
        gpu_uuids=job.gpu_uuids,
        gpu_memory=job.gpu_memory_per_gpu,
        gpus_emulated=ctx.gpus_emulated,
        cpus=spec.cpus,
        memory=spec.memory,
        shm_size=spec.shm_size,
        mounts=tuple(parse_mount(m) for m in spec.mounts),
        labels=labels,
    )
