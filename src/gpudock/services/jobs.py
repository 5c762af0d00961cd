"""Job use cases: submit, list, show, cancel and logs."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from gpudock.core.affinity import parse_toleration
from gpudock.core.arrays import ArrayRange
from gpudock.core.cuda_require import ImageRequirements, image_requirements
from gpudock.core.errors import Conflict, Infeasible, InvalidInput, NotFound
from gpudock.core.gpu_env import EnvRefused, check_job_env
from gpudock.core.job import Job, JobSpec, JobState, parse_mount
from gpudock.core.job_defaults import with_defaults
from gpudock.core.mig import unknown_profile_problem
from gpudock.core.mounts import MountRefused, check_mount
from gpudock.executors.base import EngineTimeout, Executor, ExecutorUnavailable
from gpudock.runtime.context import RuntimeContext
from gpudock.scheduler.feasibility import never_fits
from gpudock.scheduler.registry import build_profile, preemption_rules
from gpudock.scheduler.snapshot import JobRequest
from gpudock.services.admissible import check_admissible
from gpudock.services.arrays import insert_tasks, plan_array
from gpudock.services.config_guard import write_checked
from gpudock.services.dependencies import check_dependencies
from gpudock.services.job_logs import LogReader, open_logs
from gpudock.services.preemption import Protection, protection_of
from gpudock.services.priority import resolve_priority
from gpudock.services.queue_access import check_member, check_pending_limit
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.snapshot import load_nodes
from gpudock.store.tokens import Principal

log = logging.getLogger("gpudock.jobs")

Checked = tuple[JobSpec, bool, ArrayRange | None, str | None]
"""What ``submit`` checked: the final spec, whether it may preempt, its array, and its
image's requirements (``image_cuda_require``)."""


def image_cuda_require(executor: Executor, spec: JobSpec) -> str | None:
    """The ``NVIDIA_REQUIRE_*`` of the job's image and env (the env's, the one NVIDIA key
    a job may set, override the image's) as ``ImageRequirements.text``; None when there
    are none or the image is not known here yet (not pulled, or the engine does not
    answer: a job is not refused for what cannot be read). ``InvalidInput`` for a
    requirement that does not parse: the toolkit would refuse the container."""
    try:
        own = image_requirements(spec.env)
        try:
            found = executor.image_requirements(spec.image)[1]
        except (ExecutorUnavailable, EngineTimeout) as err:
            log.info("requirements of image %s not read: %s", spec.image, err)
            found = None
    except ValueError as err:
        raise InvalidInput(f"image {spec.image}: {err}", field="image") from None
    merged = {**(found.requirements if found else {}), **(own.requirements if own else {})}
    return ImageRequirements(merged).text() if merged else None


class JobService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def submit(self, spec: JobSpec, principal: Principal) -> Job:
        """Validate against policy and inventory, store as PENDING, wake the scheduler.

        Raises ``InvalidInput`` for a mount outside the admin allowlist (or
        ``:rw`` under a read-only entry) and for env keys the GPU policy refuses,
        ``Infeasible`` for a job no node could ever run, in the profile's filters' words
        (after ``job_defaults`` filled in its unset ``cpus`` and ``memory``; unless
        ``scheduler.never_fits`` is ``pending``) or its queue could never admit (an
        unknown queue when queues are declared, a limit or per-user cap it exceeds:
        ``admissible.py``), and ``Forbidden`` for
        a priority or priority class the caller may not use (``priority.py``) or
        a queue the caller is not a member of, and ``TooManyRequests`` over
        the queue's ``max_pending_per_user`` (``queue_access.py``). ``NotFound``
        for a dependency the caller cannot see (``dependencies.py``); ``InvalidInput``
        for an array over ``api.max_array_size``, whose tasks are then all stored
        at once (``arrays.py``; the first task is returned).
        """

        def check() -> Checked:
            config = self.ctx.config
            check_member(principal, spec.queue, config.scheduler.queues)
            self._check_mounts(spec)
            self._check_env(spec)
            self._check_shares(spec)
            self._check_mig(spec)
            final, can_preempt = resolve_priority(spec, principal, config.scheduler)
            final = with_defaults(final, config.job_defaults)  # stored: counted and limits
            cuda = image_cuda_require(self.ctx.executor, final)
            self._check_feasible(final, cuda)
            check_admissible(self.ctx, final, principal.user)  # the queue's half
            return final, can_preempt, plan_array(final, config.api.max_array_size), cuda

        def write(session: Session, checked: Checked) -> Job:
            final, can_preempt, array, cuda = checked
            queues, now = self.ctx.config.scheduler.queues, self.ctx.clock()
            check_pending_limit(session, principal, final.queue, queues, array.size if array else 1)
            check_dependencies(session, final, principal)
            return insert_tasks(session, final, principal.user, now, can_preempt, array, cuda)

        job = write_checked(self.ctx, check, write)
        log.info(
            "job %d submitted by %s to queue %s",
            job.id,
            principal.user,
            job.spec.queue,
            extra={"job": job.id},
        )
        self.ctx.wake_scheduler.set()
        return job

    def get(self, job_id: int, principal: Principal) -> Job:
        """The job, if it exists and ``principal`` may see it (else ``NotFound``)."""
        with self.ctx.db.read() as session:
            job = job_store.get_job(session, job_id)
        if job is None or not (principal.is_admin or job.user == principal.user):
            raise NotFound(f"job {job_id} not found")
        return job

    def protection(self, job: Job) -> Protection | None:
        """What the scheduler's preemption rules (``scheduler.preemption``) say about
        ``job`` now (``services/preemption.py``); None unless it holds GPUs."""
        rules = preemption_rules(self.ctx.config.scheduler)
        return protection_of(job, rules, self.ctx.clock())

    def events(self, job_id: int, principal: Principal) -> list[dict[str, object]]:
        self.get(job_id, principal)
        with self.ctx.db.read() as session:
            return job_store.job_events(session, job_id)

    def query(
        self,
        principal: Principal,
        states: list[JobState] | None = None,
        queue: str | None = None,
        user: str | None = None,
        limit: int = 500,
        before: int | None = None,
    ) -> list[Job]:
        """Jobs visible to ``principal``, newest first; users see only their own.

        ``before`` is a paging cursor: only jobs with a smaller id.
        """
        if not principal.is_admin:
            if user is not None and user != principal.user:
                return []
            user = principal.user
        with self.ctx.db.rows() as conn:
            return job_store.list_jobs(
                conn, states=states, queue=queue, user=user, limit=limit, before=before
            )

    def cancel(self, job_id: int, principal: Principal) -> Job:
        """Cancel a job. Pending and allocated jobs end at once; running ones are stopped
        by the controller (SIGTERM, then SIGKILL after the grace period).

        Raises ``Conflict`` if the job already ended.
        """
        self.get(job_id, principal)  # NotFound unless visible to the caller
        now = self.ctx.clock()
        reason = f"cancelled by {principal.user}"
        with self.ctx.db.write() as session:
            for state in (JobState.PENDING, JobState.ALLOCATED):
                if job_store.transition(session, job_id, state, JobState.CANCELLED, now, reason):
                    break
            else:
                if not job_store.request_stop(session, job_id, "cancel", principal.user):
                    current = job_store.get_job(session, job_id)
                    assert current is not None
                    if current.state.terminal:
                        raise Conflict(f"job {job_id} already {current.state.value}")
        self.ctx.wake_scheduler.set()
        self.ctx.wake_reconciler.set()  # stops a running container now, not next period
        return self.get(job_id, principal)

    def logs(self, job_id: int, principal: Principal, follow: bool = False) -> LogReader:
        """Archived logs of earlier attempts, then the live container's (following it if
        asked); ``NotFound`` at once for a job the caller cannot see (``job_logs.py``)."""
        return open_logs(self, job_id, principal, follow)

    def _check_mounts(self, spec: JobSpec) -> None:
        """Each mount's path string under an allowlist entry that allows its mode; none
        under an ``rw`` entry while the executor cannot stage mounts (``mount_problem``).

        Symlinks are resolved at launch, by the executor (``gpudock.core.mounts``).
        """
        if not spec.mounts:
            return
        if not self.ctx.executor.binds_mounts:
            raise InvalidInput(
                f"mounts are not available on backend {self.ctx.config.backend}: the server "
                "cannot check host paths on the node a job lands on; use a volume in the image",
                field="mounts",
            )
        allowed = self.ctx.config.executor.allowed_mounts
        unsafe = self.ctx.executor.mount_problem()
        for text in spec.mounts:
            mount = parse_mount(text)
            try:
                check_mount(mount.host, mount.read_only, allowed, unsafe)
            except MountRefused as exc:
                raise InvalidInput(f"mount {text!r}: {exc}", field="mounts") from None

    def _check_env(self, spec: JobSpec) -> None:
        """NVIDIA keys within the admin's policy (``gpudock.core.gpu_env``)."""
        try:
            check_job_env(spec.env, self.ctx.config.executor.driver_capabilities)
        except EnvRefused as exc:
            raise InvalidInput(str(exc), field="env") from None

    def _check_shares(self, spec: JobSpec) -> None:
        """A GPU memory share needs GPUs to be a share of (else silently a CPU-only job)."""
        if spec.gpu_memory is not None and spec.gpus == 0:
            raise InvalidInput(
                "gpu_memory is a share of each of the job's GPUs: give gpus (1 or more) "
                "with it, or leave it out for a CPU-only job",
                field="gpu_memory",
            )

    def _check_mig(self, spec: JobSpec) -> None:
        """A MIG job's profile is one that a node's GPUs report or offer (``core/mig.py``:
        ``known_profiles``); ``InvalidInput`` naming the known ones otherwise."""
        if spec.mig is None:
            return
        with self.ctx.db.read() as session:
            known = inv_store.known_mig_profiles(session)
        problem = unknown_profile_problem(spec.mig, known)
        if problem is not None:
            raise InvalidInput(problem, field="mig")

    def _check_feasible(self, spec: JobSpec, cuda_require: str | None = None) -> None:
        """Raise ``Infeasible`` when no node could ever run the job, in the words of the
        profile's filters (``scheduler.feasibility.never_fits``: the filters on each node as
        it would be with nothing running); nothing when ``scheduler.never_fits`` is
        ``pending`` (the cycle then keeps the job pending with the same reasons).

        Every placement constraint goes into the request (CPU-only jobs too: a
        selector or the nodes' taints may rule out every node). A job that fits
        this process's cached nodes (``RuntimeContext.feasibility_nodes``, true
        at the cluster version ``write_checked`` checks again under the write
        lock) is accepted without a read; a refusal is always decided on nodes
        read from the store now.
        """
        config = self.ctx.config.scheduler
        if config.never_fits == "pending":
            return
        request = JobRequest(
            id=0,
            gpus=0 if spec.mig is not None else spec.gpus,  # as the snapshot loads it
            submitted_at=0.0,
            gpu_memory=spec.gpu_memory,
            gpu_model=spec.gpu_model,
            nodes=spec.nodes,
            cpus=spec.cpus,
            node_selector=tuple(sorted(spec.node_selector.items())),
            tolerations=tuple(parse_toleration(t) for t in spec.tolerations),
            topology=spec.topology,
            memory=spec.memory,
            mig=spec.mig,
            gpu_compute=spec.gpu_compute,
            cuda_require=cuda_require,
        )
        profile = build_profile(config)
        if never_fits(request, self.ctx.feasibility_nodes(), profile) is None:
            return
        with self.ctx.db.read() as session:
            nodes = load_nodes(session)
        refusal = never_fits(request, nodes, profile)
        if refusal is not None:
            field = refusal.field or "gpus"
            raise Infeasible(f"job can never be scheduled: {refusal.message}", field=field)
