"""Who may submit to a queue, and how many jobs a user may keep waiting there.

Checked at submit (``JobService.submit``):

* **membership**: a queue with ``members`` admits only the users it names,
  directly or through a ``group:NAME``; anyone else gets ``Forbidden`` (403)
  naming the queue (not 404: the queue's existence is no secret). Queues
  without ``members`` (and undeclared queues) are open. Admins may submit
  to every queue.
* **pending limit**: with ``max_pending_per_user`` set, a submit that would
  give the user more PENDING jobs in the queue than that gets
  ``TooManyRequests`` (429) naming the limit. It applies to admins too (it
  is a property of the queue, counted per user name). The count runs in the
  submit's own write transaction (``check_pending_limit``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from gpudock.core.errors import Forbidden, TooManyRequests
from gpudock.queue.config import QueuesConfig
from gpudock.queue.membership import is_member
from gpudock.store.tokens import Principal
from gpudock.store.user_jobs import pending_count


def check_member(principal: Principal, queue: str, config: QueuesConfig) -> None:
    """Raise ``Forbidden`` unless ``principal`` may submit to ``queue``."""
    if principal.is_admin or is_member(config, queue, principal.user):
        return
    raise Forbidden(
        f"user {principal.user!r} is not a member of queue {queue!r}; "
        "ask an admin to add you (or a group of yours) to its members"
    )


def check_pending_limit(
    session: Session, principal: Principal, queue: str, config: QueuesConfig, count: int = 1
) -> None:
    """Raise ``TooManyRequests`` when ``count`` more PENDING jobs (an array's tasks)
    would exceed the queue's limit.

    Must run in the write transaction that inserts the job.
    """
    limit = config.queue(queue).max_pending_per_user
    if limit is None:
        return
    pending = pending_count(session, principal.user, queue)
    if pending + count > limit:
        adding = f" (this array adds {count})" if count > 1 else ""
        raise TooManyRequests(
            f"queue {queue!r} allows {limit} pending jobs per user (max_pending_per_user) "
            f"and user {principal.user!r} has {pending}{adding}; wait until some start, "
            "or cancel one"
        )


def add_standing(
    report: dict[str, Any], config: QueuesConfig, principal: Principal, pending: dict[str, int]
) -> dict[str, Any]:
    """``report`` (``QueuesReport.to_dict()``) with access facts added to each queue.

    Everyone gets ``max_pending_per_user`` and ``you``: ``member`` (named, or
    the queue is open), ``may_submit`` (member or admin), ``pending`` (the
    caller's PENDING jobs there) and ``max_pending``. Admins also get each
    queue's ``members`` as configured (null: open to all) and the ``groups``;
    users never see who else is a member.
    """
    for row in report["queues"]:
        queue = config.queue(row["name"])
        member = is_member(config, queue.name, principal.user)
        row["max_pending_per_user"] = queue.max_pending_per_user
        row["you"] = {
            "user": principal.user,
            "member": member,
            "may_submit": member or principal.is_admin,
            "pending": pending.get(queue.name, 0),
            "max_pending": queue.max_pending_per_user,
        }
        if principal.is_admin:
            row["members"] = None if queue.members is None else list(queue.members)
    if principal.is_admin:
        report["groups"] = {name: list(users) for name, users in config.groups.items()}
    return report
