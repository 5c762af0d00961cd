"""Writes that must agree with the scheduling config (and the nodes) in force.

``AdminService.apply`` checks the store (no unfinished job uses a class it
removes) and stores the config in one write transaction, which bumps the
cluster version; a node's registration bumps it too. Every write transaction
is serialised, across processes and hosts (``store/db.py``). A use case that
checks a request against what its process caches (a priority class, a
queue's members, the nodes a job must fit) and then writes does so through
``write_checked``: once it holds the write lock it syncs its process with the
stored cluster version (``RuntimeContext.sync``), and if the config in force
is not the one it checked against, it checks again. So a job naming a class
either commits before an apply that removes the class (which then sees the
job and is refused) or is checked against the new config (and refused
there), whichever API process took it: no job is left naming a class that is
gone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.orm import Session

from gpudock.runtime.context import RuntimeContext

Checked = TypeVar("Checked")
Written = TypeVar("Written")


def write_checked(
    ctx: RuntimeContext,
    check: Callable[[], Checked],
    write: Callable[[Session, Checked], Written],
) -> Written:
    """``write(session, check())`` in one write transaction, with ``check`` run (outside
    it) against the config in force when the transaction holds the write lock.

    ``check`` reads ``ctx.config`` (and ``ctx.feasibility_nodes``) and raises to
    refuse; it may run more than once (once per change of the cluster version
    that lands between it and the lock). Costs one indexed read under the lock.
    A refusal from ``check`` is only final once this process's config is
    current (one read): one from a config older than the store's is checked
    again, so an apply made anywhere is in force here as soon as it returns.
    """
    while True:
        config = ctx.config
        try:
            checked = check()
        except Exception:
            with ctx.db.read() as session:
                ctx.sync(session)
            if ctx.config is config:
                raise
            continue  # refused by a config that is gone: check against the new one
        with ctx.db.write() as session:
            ctx.sync(session)  # a new ``ctx.config`` if the version moved since ``check``
            if ctx.config is config:
                return write(session, checked)
