"""Per-user running limits inside a queue: ``max_running_gpus_per_user``.

Pure. A queue's ``max_running_gpus_per_user`` caps the GPU-equivalents
(the counting rule of ``resources.py``) that one user's jobs hold in it,
running jobs and jobs placed earlier in the same cycle alike. A job that
would take its user over the cap waits with a ``quota`` reason naming the
limit; it never preempts for it (more capacity would not help). Queues
without the setting, and users without jobs there, are never refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpudock.core.job import PendingReason
from gpudock.queue.config import QueuesConfig
from gpudock.queue.resources import Quantity, amount, exact, number

LAYER = "quota"


class UserLimits:
    """The cycle's per-(queue, user) GPU tally against each queue's per-user cap.

    Mutable: ``charge`` adds a placement. Built from what the running jobs
    hold (``held``); never reads anything else.
    """

    def __init__(
        self, limits: Mapping[str, Quantity], held: Mapping[tuple[str, str], Quantity]
    ) -> None:
        self._limits = dict(limits)
        self._held = dict(held)

    @classmethod
    def of(
        cls, config: QueuesConfig, held: Callable[[], Mapping[tuple[str, str], Quantity]]
    ) -> UserLimits | None:
        """None when no queue sets ``max_running_gpus_per_user`` (no step at all); else the
        limits, with ``held()`` (what each ``(queue, user)`` holds now)."""
        limits = {
            q.name: exact(q.max_running_gpus_per_user)
            for q in config.queues
            if q.max_running_gpus_per_user is not None
        }
        return cls(limits, held()) if limits else None

    def limit(self, queue: str) -> Quantity | None:
        """``queue``'s ``max_running_gpus_per_user``; None when it sets none."""
        return self._limits.get(queue)

    def refuse(self, queue: str, user: str, gpus: Quantity) -> PendingReason | None:
        """None when ``user`` may hold ``gpus`` more in ``queue``; else the reason."""
        limit = self._limits.get(queue)
        if limit is None or gpus == 0:
            return None
        held = self._held.get((queue, user), 0)
        if held + gpus <= limit:
            return None
        message = (
            f"user {user} holds {amount('gpus', held)} in queue {queue}; its "
            f"max_running_gpus_per_user is {number(limit)} (job needs {number(gpus)})"
        )
        if gpus > limit:
            hint = (
                f"the job needs {amount('gpus', gpus)}, more than queue {queue}'s "
                f"max_running_gpus_per_user of {number(limit)}: ask for fewer GPUs"
            )
        else:
            hint = (
                f"runs once user {user}'s jobs in queue {queue} hold at most {number(limit - gpus)}"
            )
        return PendingReason(LAYER, message, hint)

    def charge(self, queue: str, user: str, gpus: Quantity) -> None:
        """A placed job's GPUs now count for its user in its queue."""
        if queue in self._limits:
            self._held[queue, user] = self._held.get((queue, user), 0) + gpus
