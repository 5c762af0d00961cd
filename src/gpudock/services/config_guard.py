"""Writes that must agree with the scheduling config in force.

``AdminService.apply`` checks the store (no unfinished job uses a class it
removes), then swaps ``ctx.config`` inside the same write transaction, and
every write transaction is serialised (``store/db.py``). A use case that
checks a request against the config (a priority class, a queue's members)
and then writes does so through ``write_checked``: once it holds the write
lock, if the config in force is not the one it checked against, it checks
again. So a job naming a class either commits before an apply that removes
the class (which then sees the job and is refused) or is checked against the
new config (and refused there): no job is left naming a class that is gone.
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

    ``check`` reads ``ctx.config`` and raises to refuse; it may run more than
    once (once per apply that lands between it and the lock).
    """
    while True:
        config = ctx.config
        checked = check()
        with ctx.db.write() as session:
            if ctx.config is config:
                return write(session, checked)
