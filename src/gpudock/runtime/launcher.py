"""Start an ALLOCATED job's container: ALLOCATED → STARTING → RUNNING.

Idempotent and crash-safe: STARTING is committed before Docker is touched,
the container name is fixed per attempt, and ``Executor.launch`` adopts a
container that already exists. A server killed at any point and restarted
therefore finishes the launch instead of starting a second container.

Whose fault a failed launch is decides what happens (``executors.errors``):

- the job's (``LaunchError``: a bad image, command or mount): the job FAILS;
- the engine's, while it answers (``EngineFault``: e.g. containerd kept the
  task of a start that a killed dockerd never finished): the container is
  removed through the engine's API and the job is requeued to PENDING as a new
  attempt, **without spending a retry**, with the reason in its event log.
  After ``ENGINE_REQUEUE_LIMIT`` such requeues the job fails instead, so a
  broken engine cannot requeue a job forever;
- the engine unreachable (``ExecutorUnavailable``): nothing changes; the job
  stays STARTING and the reconciler resumes the launch when the engine
  answers (adopting the container if it runs, requeueing as above if not);
- the engine answering, but not about this container in time
  (``EngineTimeout`` while a ping still answers): the job stays STARTING,
  held with a reason (``undescribed.py``), and is never started a second
  time meanwhile: the container's name is fixed per attempt, and a further
  call about it fails at once while the late one runs
  (``executors/deadlines.py``).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from sqlalchemy import select

from gpudock.core.arrays import array_env
from gpudock.core.elastic import size_env
from gpudock.core.job import Job, JobState, container_name, parse_mount
from gpudock.executors.base import (
    EngineFault,
    EngineTimeout,
    ExecutorUnavailable,
    LaunchError,
    LaunchRequest,
    Member,
)
from gpudock.runtime import node_health, undescribed
from gpudock.runtime.context import RuntimeContext
from gpudock.services.registries import PullPlan, pull_login
from gpudock.store import jobs as job_store
from gpudock.store.models import GpuRow

log = logging.getLogger("gpudock.launcher")

ENGINE_REQUEUE_LIMIT = 5
"""Requeues for the engine's faults one job may get before it fails instead."""
ENGINE_REQUEUE_REASON = "engine fault while starting"
"""How the event log's reason for such a requeue begins (they are counted by it)."""


def launch(ctx: RuntimeContext, job_id: int) -> None:
    """Bring job ``job_id`` (ALLOCATED or STARTING) to RUNNING, or fail it with a reason."""
    with ctx.db.write() as session:
        job = job_store.get_job(session, job_id)
        if job is None or job.state not in (JobState.ALLOCATED, JobState.STARTING):
            return
        if job.stop_requested:
            return  # the reconciler cancels it without starting anything
        fresh = job.state is JobState.ALLOCATED  # this attempt's name is used first here
        if fresh:
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
    with ctx.db.read() as session:  # decrypting a login is no work for a write lock
        pull = pull_login(ctx, session, job.user, job.spec.image)
        totals = session.scalars(
            select(GpuRow.memory_total).where(GpuRow.uuid.in_(job.gpu_uuids))
        ).all()
    request = build_request(ctx, job, pull, min(totals) if totals else None)
    try:
        status = ctx.executor.launch(replace(request, fresh=fresh))
    except EngineFault as exc:
        requeue_after_engine_fault(ctx, job, exc)
        return
    except EngineTimeout as exc:
        undescribed.engine_late(ctx, job, exc)
        log.warning("job %s: no answer about its container yet; held, not started again", job_id)
        return
    except ExecutorUnavailable as exc:
        node_health.mark_engine_down(ctx, exc)
        log.warning("job %s: %s; the launch resumes when it returns", job_id, exc)
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
            gpu_layers=gpu_layers(job, request.mps is not None, ctx.gpu_watchdog) or None,
        )
    if running:
        ctx.metrics.job_started(job.spec.queue, job.submitted_at, started_at)
    log.info("job %s running in %s on GPUs %s", job_id, job.container_name, ",".join(job.gpu_uuids))


def requeue_after_engine_fault(ctx: RuntimeContext, job: Job, exc: EngineFault) -> None:
    """Remove the attempt's container, then requeue the job without spending a retry.

    If the container cannot be removed now (the engine went away again), the
    job stays STARTING: the next reconcile pass launches it again, which
    adopts the container if it runs or fails the same way and comes back here.
    Past ``ENGINE_REQUEUE_LIMIT`` requeues the job FAILS with the engine's reason.
    """
    if not exc.removed and job.container_name is not None:
        try:
            ctx.executor.remove(job.container_name)
        except EngineTimeout as late:
            undescribed.engine_late(ctx, job, late)
            return
        except ExecutorUnavailable as again:
            node_health.mark_engine_down(ctx, again)
            log.warning("job %s: %s; container not removed yet, retried later", job.id, exc)
            return
    with ctx.db.write() as session:
        earlier = sum(
            1
            for event in job_store.job_events(session, job.id)
            if (event["reason"] or "").startswith(ENGINE_REQUEUE_REASON)
        )
        if earlier >= ENGINE_REQUEUE_LIMIT:
            target = JobState.FAILED
            reason = f"could not start container: {exc} ({earlier} requeues after engine faults)"
        else:
            target = JobState.PENDING
            reason = f"{ENGINE_REQUEUE_REASON} ({exc}); requeued, no retry used"
        moved = job_store.transition(
            session, job.id, JobState.STARTING, target, ctx.clock(), reason=reason
        )
    if moved:
        ctx.wake_scheduler.set()  # its GPUs are free again
        log.warning("job %s: %s", job.id, reason)


def gpu_layers(job: Job, mps: bool, watchdog: bool) -> list[str]:
    """The layers that hold a shared job to its GPU memory share, strongest first:
    ``mps`` (the driver's limit), ``watchdog`` (the node stops it past its share),
    ``hints`` (its frameworks told the limit). A MIG job's is ``mig`` (the hardware
    partitions the GPU's memory); a job with whole GPUs has none."""
    if job.spec.mig is not None and job.gpu_uuids:
        return ["mig"]
    if job.gpu_memory_per_gpu is None or not job.gpu_uuids:
        return []
    return [*(["mps"] if mps else []), *(["watchdog"] if watchdog else []), "hints"]


def build_request(
    ctx: RuntimeContext,
    job: Job,
    pull: PullPlan | None = None,
    gpu_memory_total: int | None = None,
) -> LaunchRequest:
    """The executor request for the job's current attempt and allocation; ``pull``
    is the job owner's login for the image's registry (``services/registries.py``);
    ``gpu_memory_total`` the memory of its smallest GPU (for the framework hints).
    A shared job on a node that shares GPUs by MPS gets the node's MPS setup."""
    spec = job.spec
    labels = dict(spec.labels)
    labels.update({"gpudock.user": job.user, "gpudock.queue": spec.queue})
    return LaunchRequest(
        job_id=job.id,
        attempt=job.attempt,
        name=job.container_name or container_name(ctx.instance_id, job.id, job.attempt),
        image=spec.image,
        command=spec.command,
        env={
            **spec.env,
            **array_env(job.array_id, job.array_index),
            **size_env(spec.elastic_range, len(job.gpu_uuids)),
        },
        gpu_uuids=job.gpu_uuids,
        gpu_memory=job.gpu_memory_per_gpu,
        gpu_memory_total=gpu_memory_total,
        gpu_compute=spec.gpu_compute,
        mps=ctx.mps if job.gpu_memory_per_gpu is not None and job.gpu_uuids else None,
        gpus_emulated=ctx.gpus_emulated,
        cpus=spec.cpus,
        memory=spec.memory,
        shm_size=spec.shm_size,
        mounts=tuple(parse_mount(m) for m in spec.mounts),
        labels=labels,
        pull_login=None if pull is None else pull.login,
        always_pull=pull is not None and pull.always,
        node=job.node,
        members=tuple(
            Member(rank, part.node, part.gpu_uuids) for rank, part in enumerate(job.gang)
        ),
    )
