"""Who may submit to which queue: ``members`` and ``groups`` of the queues config.

Pure. A queue without ``members`` is open to every user; otherwise a user
may submit when named directly or through a ``group:NAME`` entry. Admins
are let through by the caller (``services/membership.py``), not here.
"""

from __future__ import annotations

from gpudock.queue.config import GROUP_PREFIX, QueuesConfig


def members_of(config: QueuesConfig, queue: str) -> frozenset[str] | None:
    """The users of ``queue`` with groups expanded; None when the queue is open to all."""
    members = config.queue(queue).members
    if members is None:
        return None
    users: set[str] = set()
    for member in members:
        if member.startswith(GROUP_PREFIX):
            users.update(config.groups.get(member.removeprefix(GROUP_PREFIX), ()))
        else:
            users.add(member)
    return frozenset(users)


def is_member(config: QueuesConfig, queue: str, user: str) -> bool:
    """True when ``user`` may submit to ``queue`` (an open queue admits everyone)."""
    members = members_of(config, queue)
    return members is None or user in members
