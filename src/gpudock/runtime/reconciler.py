"""Match jobs to containers and make the store agree with Docker.

Run at start-up and periodically. One pass:

1. ping the engine; mark the node unavailable (and stop) if it does not answer;
2. list this instance's containers by label, and the jobs that hold GPUs;
3. for each such job: launch it (ALLOCATED, or STARTING without a container),
   adopt a running container, finish an exited one, stop one asked to stop
   or over its ``max_runtime``, and mark one whose container vanished LOST
   (or requeue it when retries remain); a job whose container the engine
   lists but does not describe in time (``UNKNOWN``) is held as it is, with
   a reason, and the pass goes on with the others (``undescribed.py``);
4. stop and remove containers that belong to no active job (orphans),
   archiving their logs first;
5. unmount what launches of a crashed server left staged (``release_stale_mounts``),
   and reap what a crashed engine left of this instance's containers (``reap_leftovers``).

On a multi-node engine (``ctx.cluster``) a pass judges every node's jobs
except those on a node that is away (the cluster watcher's node loss owns
them), and leaves node statuses to the watcher.

``reconcile_container`` does step 3 for the one job an engine event names,
as soon as the event arrives (or, when the job's launch or finish is under
way, as soon as that work ends); the full pass stays the safety net.
"""

from __future__ import annotations

import functools
import logging
from concurrent.futures import Future

from gpudock.core.inventory import NodeStatus
from gpudock.core.job import Job, JobState, job_of_container
from gpudock.executors.base import (
    ContainerState,
    ContainerStatus,
    EngineTimeout,
    ExecutorUnavailable,
)
from gpudock.runtime import finisher, launcher, node_health, undescribed
from gpudock.runtime.context import RuntimeContext
from gpudock.store import cluster as cluster_store
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store

log = logging.getLogger("gpudock.reconciler")


def reconcile(ctx: RuntimeContext) -> None:
    """One full pass (see module docstring). Never raises for engine outages.

    Jobs are read *before* containers are listed: a job seen RUNNING had its
    container before the listing began, so absence from the listing means it
    is really gone. Containers of jobs launched after that read are checked
    against the store again before being treated as orphans.
    """
    with ctx.db.read() as session:
        active = job_store.list_jobs(session, states=job_store.ACTIVE_STATES, newest_first=False)
        away = cluster_store.away_nodes(session) if ctx.cluster else set()
    active = [j for j in active if _judged_here(ctx, j, away)]
    ctx.undescribed.keep_only(j.id for j in active)
    containers = _engine_containers(ctx)
    if containers is None:
        return
    by_name = {c.name: c for c in containers}
    for job in active:
        found = by_name.get(job.container_name) if job.container_name else None
        _reconcile_job(ctx, job, found)
    wanted = {j.container_name for j in active if j.container_name}
    strays = [c for c in containers if c.name not in wanted]
    if strays:
        for container in _orphans(ctx, strays):
            _handle_orphan(ctx, container)
    ctx.executor.release_stale_mounts()
    ctx.executor.reap_leftovers()


def _judged_here(ctx: RuntimeContext, job: Job, away: set[str]) -> bool:
    """Whether this pass judges ``job``: on one host, its own jobs; on a cluster, every
    job none of whose nodes is away (their engine's view is stale: the cluster
    watcher's node loss handles them, ``runtime/cluster.py``)."""
    if not ctx.cluster:
        return job.node in (None, ctx.node_name)
    return not any(part.node in away for part in job.placement)


def reconcile_container(ctx: RuntimeContext, name: str, action: str | None = None) -> bool:
    """Step 3 for the one job whose container an engine event just named.

    The full pass's decision for that job (``_reconcile_job``), taken when the
    event arrives instead of at the next pass, so a container that died frees
    its GPUs without waiting for every container to be listed and inspected.
    As in the full pass, the job is read before its container is inspected.
    For a job whose launch or finish is under way, the decision waits until
    that work ends (``RuntimeContext.after_work``) and is taken then, or
    handed to a full pass if it cannot be. A container of an attempt that
    already ended (the job finished, or was requeued as a new attempt) needs
    nothing: its finisher archives and removes it, and a real orphan is found
    by the next periodic pass; so does the ``start`` (``action``) of a job
    already RUNNING: its launch saw the start. Returns False, leaving it to a
    full pass, for a name that is no attempt of a job on this node, or when
    the engine cannot be reached. A container the engine does not describe in
    time holds its job (``undescribed.hold``).
    """
    job_id = job_of_container(ctx.instance_id, name)
    if job_id is None:
        return False  # not ours: left to the full passes
    later = functools.partial(_settle_later, ctx, name, action)
    if ctx.after_work(job_id, f"{name} {action}", later):
        return True  # the job's launch or finish ends first
    with ctx.db.read() as session:
        job = job_store.get_job(session, job_id)
        away = cluster_store.away_nodes(session) if ctx.cluster else set()
    if job is None or not _judged_here(ctx, job, away):
        return False
    if job.state not in job_store.ACTIVE_STATES or job.container_name != name:
        return True  # an ended attempt's container (its finisher removes it, or removed it)
    if action == "start" and job.state is JobState.RUNNING:
        return True  # no news: its launch recorded the start
    try:
        container = ctx.executor.inspect(name)
    except EngineTimeout as exc:
        undescribed.hold(ctx, job, name, str(exc))
        return True
    except ExecutorUnavailable:
        return False
    _reconcile_job(ctx, job, container)
    return True


def _settle_later(ctx: RuntimeContext, name: str, action: str | None) -> None:
    """An event deferred behind its job's work: decided now, else by a full pass."""
    settled = False
    try:
        settled = reconcile_container(ctx, name, action)
    finally:  # an error is logged by the lane; the full pass retries
        if not settled:
            ctx.wake_reconciler.set()


def _orphans(ctx: RuntimeContext, strays: list[ContainerStatus]) -> list[ContainerStatus]:
    """The strays whose job is gone, ended, requeued, or on another attempt."""
    ids = {c.job_id for c in strays if c.job_id is not None}
    with ctx.db.read() as session:
        jobs = {j.id: j for j in job_store.get_jobs(session, ids)}
    out = []
    for container in strays:
        job = jobs.get(container.job_id) if container.job_id is not None else None
        current = (
            job is not None and job.state.holds_resources and job.container_name == container.name
        )
        if not current:
            out.append(container)
    return out


def _engine_containers(ctx: RuntimeContext) -> list[ContainerStatus] | None:
    """Step 1 and 2: the containers, or None (node marked unavailable) on outage."""
    try:
        ctx.executor.ping()
        containers = ctx.executor.list_containers()
    except ExecutorUnavailable as exc:
        node_health.mark_engine_down(ctx, exc)
        return None
    if ctx.cluster:
        return containers  # node statuses are the cluster watcher's (runtime/cluster.py)
    with ctx.db.write() as session:
        changed = inv_store.set_node_status(
            session, ctx.node_name, NodeStatus.AVAILABLE, None, ctx.clock()
        )
    if changed:
        log.info(
            "node %s available: Docker daemon answers",
            ctx.node_name,
            extra={"node": ctx.node_name},
        )
        ctx.wake_scheduler.set()
    return containers


def _reconcile_job(ctx: RuntimeContext, job: Job, container: ContainerStatus | None) -> None:
    """Step 3 for one job: nothing while work for it is in flight; held while the
    engine does not describe its container; else settled by what the container shows."""
    if ctx.busy(job.id):
        return
    if container is not None and container.state is ContainerState.UNKNOWN:
        undescribed.hold(ctx, job, container.name, container.error or "no answer")
        return
    undescribed.settle(ctx, job)  # described (or seen absent): no longer held, if it was
    gpus = bool(job.gpu_uuids)  # its work goes first in its lane
    if job.state is JobState.ALLOCATED or (job.state is JobState.STARTING and container is None):
        if job.stop_requested:
            ctx.run_once("finish", job.id, lambda: _stop_unstarted(ctx, job), gpus=gpus)
        else:
            ctx.run_once("launch", job.id, lambda: launcher.launch(ctx, job.id), gpus=gpus)
        return
    if container is None:  # RUNNING, container gone
        ctx.run_once("finish", job.id, lambda: finisher.finish(ctx, job, None), gpus=gpus)
        return
    if container.finished:
        ctx.run_once("finish", job.id, lambda: finisher.finish(ctx, job, container), gpus=gpus)
        return
    if container.state is ContainerState.CREATED:
        ctx.run_once("launch", job.id, lambda: launcher.launch(ctx, job.id), gpus=gpus)
        return
    if job.state is JobState.STARTING:
        _adopt(ctx, job, container)
    if job.stop_requested or _over_runtime(ctx, job):
        if not job.stop_requested:
            with ctx.db.write() as session:
                job_store.request_stop(session, job.id, "max_runtime", "gpudock", ctx.clock())
            job.stop_requested = "max_runtime"
        ctx.run_once("stop", job.id, lambda: finisher.stop(ctx, job), gpus=gpus)


def _adopt(ctx: RuntimeContext, job: Job, container: ContainerStatus) -> None:
    with ctx.db.write() as session:
        moved = job_store.transition(
            session,
            job.id,
            JobState.STARTING,
            JobState.RUNNING,
            ctx.clock(),
            container_id=container.id,
            started_at=container.started_at or ctx.clock(),
            gpu_layers=launcher.gpu_layers(job, ctx.mps is not None, ctx.gpu_watchdog) or None,
        )
    if moved:
        job.state = JobState.RUNNING
        job.started_at = container.started_at or ctx.clock()
        log.info("job %s: adopted running container %s", job.id, container.name)


def _over_runtime(ctx: RuntimeContext, job: Job) -> bool:
    limit = job.spec.max_runtime
    if limit is None or job.started_at is None:
        return False
    return ctx.clock() - job.started_at > limit


def _stop_unstarted(ctx: RuntimeContext, job: Job) -> None:
    """A stop requested before any container existed: cancel, or requeue a preemption."""
    result = finisher.outcome(job, None, ctx.config.gpus.health.on_fault)
    with ctx.db.write() as session:
        job_store.transition(session, job.id, job.state, result.state, ctx.clock(), result.reason)
    ctx.wake_scheduler.set()


def _handle_orphan(ctx: RuntimeContext, container: ContainerStatus) -> Future[None] | None:
    """Step 4: a container of ours that no active job claims.

    The listing is older than the store read that found no active job: a job
    that ended in between (its container exited, its finisher is removing it)
    looks like a running orphan there. So a container listed as running is
    inspected again, and only one still running is reported and stopped; one
    gone meanwhile, or being removed (Docker's ``removing`` state, while the
    finisher's removal runs), is left alone; so is one the engine does not
    describe (``UNKNOWN``: its removal would hang as well), until a later pass.
    Returns the clean-up's future (None when one for this job is already in
    flight, or none is started).
    """
    if container.state is ContainerState.UNKNOWN:
        return None
    key = container.job_id if container.job_id is not None else -1
    if any(ctx.in_flight(kind, key) for kind in ("finish", "stop", "archive")):
        return None  # its finisher is at work: it archives the logs and removes it

    def clean() -> None:
        try:
            _remove_orphan(ctx, container)
        except ExecutorUnavailable as exc:  # engine gone again, or it refused: next pass
            log.warning("orphan container %s not removed yet: %s", container.name, exc)

    return ctx.run_once("orphan", key, clean)


def _remove_orphan(ctx: RuntimeContext, container: ContainerStatus) -> None:
    """Stop (if running), archive and remove one orphan through the engine's API.

    Any state is handled: ``created`` (never started, or a start the engine
    never finished: force-removed without a stop), ``running``, ``exited`` and
    ``dead``; a removal already in progress counts as done. A containerd shim
    that the engine itself forgot is out of reach here (docs/operations.md).
    """
    if not container.finished:
        current = ctx.executor.inspect(container.id)
        if current is None or current.state is ContainerState.REMOVING:
            return  # removed meanwhile, or being removed (by its job's finisher)
        if current.state is not ContainerState.CREATED and not current.finished:
            log.warning(
                "stopping container %s: it belongs to no active job (job %s)",
                container.name,
                container.job_id,
            )
            ctx.executor.stop(container.id, ctx.config.executor.stop_grace)
    if container.job_id is not None and container.attempt is not None:
        path = finisher.log_file(ctx, container.job_id, container.attempt)
        if not path.exists():
            finisher.archive_logs(ctx, container.job_id, container.attempt, container.id)
    ctx.executor.remove(container.id)
