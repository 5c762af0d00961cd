"""Who may give a job which priority, and which jobs may preempt.

The rules, checked at submit (``resolve_priority``):

* **classes** (``scheduler.priority_classes``): a job naming one gets its
  ``value`` and may preempt lower-priority jobs of its queue iff the class has
  ``preempt``. A class with ``users`` or ``queues`` is granted only to those
  users, in those queues; anyone else gets ``Forbidden`` (403) naming the
  class and the grant it lacks. Admins may use every class.
* **raw priorities**: a job naming no class and no priority gets its queue's
  ``default_priority`` (0 unless configured). A user may lower it, or raise it
  up to the queue's ``max_user_priority``; above that (above the default when
  no maximum is set) is ``Forbidden`` naming the limit. Admins may set any value.
* **preemption**: only a preempting class lets a job preempt by priority. A raw
  priority never does, not even an admin's: an admin who wants a job to
  preempt gives it a preempting class. Reclaim across queues (guarantees and
  fair share) does not depend on priority and is unaffected.

The result is stored on the job (``priority``, ``can_preempt``); the
scheduler decides from those alone (``scheduler.preemption``).
"""

from __future__ import annotations

from gpudock.config import PriorityClass, SchedulerConfig
from gpudock.core.errors import Forbidden, InvalidInput
from gpudock.core.job import JobSpec
from gpudock.queue.config import QueueConfig
from gpudock.store.tokens import Principal

__all__ = ["resolve_priority"]


def resolve_priority(
    spec: JobSpec, principal: Principal, config: SchedulerConfig
) -> tuple[JobSpec, bool]:
    """The spec with its final ``priority``, and whether the job may preempt.

    Raises ``InvalidInput`` (422) for an unknown class or a class with a
    different raw priority, and ``Forbidden`` (403) for a class not granted to
    ``principal`` in the spec's queue or a raw priority above the queue's limit.
    """
    if spec.priority_class is not None:
        klass = _known_class(spec, config)
        if not principal.is_admin:
            _check_grant(klass, principal.user, spec.queue)
        return spec.model_copy(update={"priority": klass.value}), klass.preempt
    queue = config.queues.queue(spec.queue)
    if "priority" not in spec.model_fields_set:
        return spec.model_copy(update={"priority": queue.default_priority}), False
    if not principal.is_admin and spec.priority > queue.user_priority_limit:
        raise Forbidden(_above_limit(spec.priority, queue))
    return spec, False


def _known_class(spec: JobSpec, config: SchedulerConfig) -> PriorityClass:
    assert spec.priority_class is not None
    klass = config.priority_class(spec.priority_class)
    if klass is None:
        known = ", ".join(c.name for c in config.priority_classes) or "none are defined"
        raise InvalidInput(
            f"priority_class {spec.priority_class!r} is unknown ({known})", field="priority_class"
        )
    if "priority" in spec.model_fields_set and spec.priority != klass.value:
        raise InvalidInput("give priority or priority_class, not both", field="priority_class")
    return klass


def _check_grant(klass: PriorityClass, user: str, queue: str) -> None:
    """``Forbidden`` unless ``klass`` is granted to ``user`` in ``queue``."""
    if klass.users is not None and user not in klass.users:
        raise Forbidden(
            f"priority class {klass.name!r} is not granted to user {user} "
            f"(it is granted to: {_names(klass.users)}); ask an admin"
        )
    if klass.queues is not None and queue not in klass.queues:
        raise Forbidden(
            f"priority class {klass.name!r} may not be used in queue {queue} "
            f"(only in: {_names(klass.queues)})"
        )


def _above_limit(priority: int, queue: QueueConfig) -> str:
    if queue.max_user_priority is None:
        return (
            f"priority {priority} is above the limit of {queue.default_priority} in queue "
            f"{queue.name}: users may only lower their priority from the queue's default "
            f"({queue.default_priority}); ask an admin for a priority class"
        )
    return (
        f"priority {priority} is above the limit of {queue.max_user_priority} in queue "
        f"{queue.name} (its max_user_priority); ask an admin for a priority class"
    )


def _names(names: list[str]) -> str:
    return ", ".join(names) if names else "no one"
