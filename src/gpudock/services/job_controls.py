"""A user's controls on a job after submit: hold, release, requeue, update.

Every control is for the job's owner or an admin; another user's job is
``NotFound`` (404), as everywhere. A control that does not apply to the job
as it is now (hold twice, release of a job not held, requeue of a PENDING
job, update of a finished one) is a ``Conflict`` (409) naming why, and
changes nothing. Each goes through one conditional write
(``store/job_controls.py``, or ``jobs.request_stop`` for a requeue) in a
short transaction; the scheduler and reconciler are woken after it commits.

* **hold** a PENDING job: the scheduler skips it (``scheduler/hold.py``)
  with a ``hold`` pending reason naming who holds it; **release** lets it run.
* **requeue** an ALLOCATED, STARTING or RUNNING job: a stop request of kind
  ``requeue``; the runtime stops its container as for a preemption and the
  job goes back to PENDING without spending a retry. ``force_requeue``
  (admins) does it at once for a job whose node is lost, stopping nothing.
* **update** a PENDING job's ``priority_class``, ``max_runtime`` or
  ``gpus``: the new spec is validated exactly as a submit would be (spec
  rules, queue membership, priority rights, never-fits on the nodes and in
  the queue). An active job may
  only have its ``max_runtime`` lowered, by its owner.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from gpudock.core.errors import Conflict, Forbidden, InvalidInput
from gpudock.core.job import Job, JobSpec, JobState
from gpudock.core.units import format_duration
from gpudock.executors.base import ExecutorUnavailable
from gpudock.scheduler.hold import held_reason
from gpudock.services.admissible import check_admissible
from gpudock.services.config_guard import write_checked
from gpudock.services.jobs import JobService
from gpudock.services.priority import resolve_priority
from gpudock.services.queue_access import check_member
from gpudock.store import cluster as cluster_store
from gpudock.store import job_controls as control_store
from gpudock.store import jobs as job_store
from gpudock.store.tokens import Principal

log = logging.getLogger("gpudock.jobs")

UPDATABLE = ("priority_class", "max_runtime", "gpus")
"""The spec fields ``update`` may change."""

REQUEUE_FROM = (JobState.ALLOCATED, JobState.STARTING, JobState.RUNNING)


class JobControls(JobService):
    """Hold, release, requeue and update; ``get`` (visibility) is ``JobService``'s."""

    def hold(self, job_id: int, principal: Principal) -> Job:
        """Hold a PENDING job. ``Conflict`` if it is already held or not PENDING."""
        job = self.get(job_id, principal)
        with self.ctx.db.write() as session:
            done = control_store.hold(
                session, job_id, principal.user, self.ctx.clock(), held_reason(principal.user)
            )
        if not done:
            current = self.get(job_id, principal)
            if current.held_by is not None:
                raise Conflict(f"job {job_id} is already held (by {current.held_by})")
            raise Conflict(f"job {job_id} is {current.state.value}; only a PENDING job is held")
        log.info("job %d held by %s", job.id, principal.user, extra={"job": job.id})
        return self.get(job_id, principal)

    def release(self, job_id: int, principal: Principal) -> Job:
        """Release a held job. ``Conflict`` if it is not held."""
        self.get(job_id, principal)
        with self.ctx.db.write() as session:
            done = control_store.release(session, job_id, principal.user, self.ctx.clock())
        if not done:
            raise Conflict(f"job {job_id} is not held")
        log.info("job %d released by %s", job_id, principal.user, extra={"job": job_id})
        self.ctx.wake_scheduler.set()
        return self.get(job_id, principal)

    def requeue(self, job_id: int, principal: Principal) -> Job:
        """Send an active job back to PENDING (its container is stopped; no retry used).

        ``Conflict`` for a PENDING or finished job, or one already being stopped.
        """
        job = self.get(job_id, principal)
        if job.state not in REQUEUE_FROM:
            raise Conflict(
                f"job {job_id} is {job.state.value}; only an ALLOCATED, STARTING or "
                "RUNNING job can be requeued"
            )
        with self.ctx.db.write() as session:
            done = job_store.request_stop(session, job_id, "requeue", principal.user)
        if not done:
            current = self.get(job_id, principal)
            if current.stop_requested is not None:
                raise Conflict(f"job {job_id} is already stopping ({current.stop_requested})")
            raise Conflict(f"job {job_id} is {current.state.value}; it cannot be requeued now")
        log.info("job %d requeue asked by %s", job_id, principal.user, extra={"job": job_id})
        self.ctx.wake_reconciler.set()
        return self.get(job_id, principal)

    def force_requeue(self, job_id: int, principal: Principal) -> Job:
        """Requeue an active job whose node is lost, at once, without stopping anything.

        Admins only (``Forbidden``). ``Conflict`` unless the job is active with
        a part on a node that is not ready: on a ready node a plain requeue
        stops its container first. The job goes back to PENDING (no retry
        used); its services are removed. The caller vouches that the old
        container stopped: gpudock cannot stop it while its node is away.
        """
        if not principal.is_admin:
            raise Forbidden("only an admin can force a requeue")
        job = self.get(job_id, principal)
        if job.state not in REQUEUE_FROM:
            raise Conflict(f"job {job_id} is {job.state.value}; only an active job is requeued")
        with self.ctx.db.read() as session:
            away = sorted(cluster_store.away_nodes(session) & {p.node for p in job.placement})
        if not away:
            raise Conflict(
                f"job {job_id} runs on a node that is ready; requeue it without --force "
                "(its container is stopped first)"
            )
        reason = (
            f"requeued by {principal.user} with --force: node {', '.join(away)} is lost and "
            "the operator vouches its container stopped; no retry used"
        )
        with self.ctx.db.write() as session:
            done = job_store.transition(
                session, job_id, job.state, JobState.PENDING, self.ctx.clock(), reason=reason
            )
        if not done:
            raise Conflict(f"job {job_id} changed meanwhile; look at it again")
        log.warning("job %d: %s", job_id, reason, extra={"job": job_id})
        if job.container_name is not None:
            name = job.container_name
            self.ctx.run_once("orphan", job_id, lambda: self._remove_quietly(name))
        self.ctx.wake_scheduler.set()
        return self.get(job_id, principal)

    def _remove_quietly(self, name: str) -> None:
        try:
            self.ctx.executor.remove(name)
        except ExecutorUnavailable as exc:  # the orphan pass removes it later
            log.info("services of %s not removed yet: %s", name, exc)

    def update(self, job_id: int, changes: dict[str, Any], principal: Principal) -> Job:
        """Change a job's ``UPDATABLE`` fields (see the module doc for the rules).

        Raises ``InvalidInput`` (422) for an empty or invalid change,
        ``Forbidden`` (403) for rights a submit would lack or an active job's
        limit changed by someone other than its owner, ``Infeasible`` (422)
        for a shape no node could hold or its queue could never admit, and
        ``Conflict`` (409) for a finished job or a change an active job does
        not allow.
        """
        job = self.get(job_id, principal)
        if not changes:
            raise InvalidInput(f"nothing to update: give one of {', '.join(UPDATABLE)}")
        if job.state.terminal:
            raise Conflict(f"job {job_id} already {job.state.value}; it cannot be updated")
        spec = _changed_spec(job.spec, changes)
        if job.state is JobState.PENDING:
            return self._update_pending(job, spec, changes, principal)
        return self._lower_runtime(job, spec, changes, principal)

    def _update_pending(
        self, job: Job, spec: JobSpec, changes: dict[str, Any], principal: Principal
    ) -> Job:
        def check() -> tuple[JobSpec, bool]:
            check_member(principal, spec.queue, self.ctx.config.scheduler.queues)
            self._check_shares(spec)
            final, can_preempt = resolve_priority(spec, principal, self.ctx.config.scheduler)
            self._check_feasible(final)
            check_admissible(self.ctx, final, job.user)  # the queue's half
            return final, can_preempt

        def write(session: Session, checked: tuple[JobSpec, bool]) -> bool:
            final, can_preempt = checked
            return control_store.update_pending(
                session, job.id, final, can_preempt, principal.user, self.ctx.clock(), changes
            )

        done = write_checked(self.ctx, check, write)  # agrees with the config in force
        if not done:
            current = self.get(job.id, principal)
            raise Conflict(
                f"job {job.id} is {current.state.value} now; only a PENDING job may change "
                "more than a lower max_runtime"
            )
        self.ctx.wake_scheduler.set()
        return self.get(job.id, principal)

    def _lower_runtime(
        self, job: Job, spec: JobSpec, changes: dict[str, Any], principal: Principal
    ) -> Job:
        if set(changes) != {"max_runtime"}:
            others = ", ".join(sorted(set(changes) - {"max_runtime"}))
            raise Conflict(
                f"job {job.id} is {job.state.value}: only its max_runtime may be lowered "
                f"({others} can change only while it is PENDING)"
            )
        if principal.user != job.user:
            raise Forbidden(f"only the owner ({job.user}) may lower a running job's max_runtime")
        old, new = job.spec.max_runtime, spec.max_runtime
        if new is None or (old is not None and new >= old):
            raise Conflict(
                f"job {job.id} is {job.state.value}: max_runtime may only be lowered "
                f"(it is {format_duration(old) if old is not None else 'unlimited'})"
            )
        with self.ctx.db.write() as session:
            done = control_store.lower_max_runtime(
                session, job.id, spec, principal.user, self.ctx.clock(), changes
            )
        if not done:
            current = self.get(job.id, principal)
            raise Conflict(f"job {job.id} is {current.state.value} now; nothing was changed")
        self.ctx.wake_reconciler.set()  # the watchdog reads the new limit
        return self.get(job.id, principal)


def _changed_spec(spec: JobSpec, changes: dict[str, Any]) -> JobSpec:
    """``spec`` with ``changes`` applied and validated as a submitted spec would be.

    A new ``priority_class`` replaces the job's priority (the class sets it);
    ``InvalidInput`` names a field the rules refuse.
    """
    unknown = sorted(set(changes) - set(UPDATABLE))
    if unknown:
        raise InvalidInput(
            f"{unknown[0]} cannot be updated (only {', '.join(UPDATABLE)})", field=unknown[0]
        )
    data = spec.model_dump(mode="json", exclude_unset=True)
    if "priority_class" in changes:
        data.pop("priority", None)
    data.update(changes)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or None
        message = first["msg"].removeprefix("Value error, ")
        raise InvalidInput(f"{field}: {message}" if field else message, field=field) from None
