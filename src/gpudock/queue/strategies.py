"""Queueing strategies: how a scheduling cycle walks the ordered jobs of each queue.

The cycle orders the pending jobs (priority, then fair share across
queues), then hands them, one at a time, to the strategies it was given,
by name, from ``STRATEGIES``. Each strategy makes a ``Walk`` for one cycle
that may:

* reorder the stream (``jobs``): ``borrow-last`` tries the jobs that would
  borrow another queue's capacity only after every other job;
* hold a job back before it is tried (``hold``), with the reason it waits:
  ``strict-fifo`` keeps every job of a queue behind the queue's first
  blocked job (head-of-line blocking, as YARN's capacity scheduler or
  Kueue's StrictFIFO);
* learn that a job was placed (``placed``).

A strategy whose ``reserves`` is False forbids the cycle's EASY
reservation (and so backfill): under strict FIFO a queue's blocked head
already holds the queue. ``DEFAULT`` is what the server runs. This layer is
pure: it sees a job's ``id`` and ``queue`` and, for ``borrow-last``, the
cycle's answer to "would admitting it now borrow?".

Adding a strategy: a class with ``name``, ``reserves`` and ``walk``, and
one line in ``STRATEGIES``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

from gpudock.core.job import PendingReason


class QueuedJob(Protocol):
    """What a strategy reads of a job."""

    @property
    def id(self) -> int: ...

    @property
    def queue(self) -> str: ...


J = TypeVar("J", bound=QueuedJob)

Borrows = Callable[[J], bool]
"""True when admitting the job now would take capacity borrowed from other queues."""


class Walk(Protocol[J]):
    """One cycle's walk under a strategy; the cycle calls it in this order, per job."""

    def jobs(self, ordered: Iterable[J]) -> Iterable[J]:
        """The jobs to try, lazily (quota and fair share change as jobs are placed)."""
        ...

    def hold(self, job: J) -> PendingReason | None:
        """Why ``job`` may not be tried now, or None to try it."""
        ...

    def placed(self, job: J) -> None:
        """``job`` was placed (a gang: all its parts)."""
        ...


class QueueingStrategy(Protocol):
    """A named way to walk the queues; stateless: per-cycle state lives in its ``Walk``."""

    name: str
    reserves: bool  # False: no EASY reservation (and no backfill) in a cycle under it

    def walk(self, borrows: Borrows[J] | None) -> Walk[J]:
        """A walk for one cycle; ``borrows`` is None when no queue has a quota."""
        ...


class _Walk(Generic[J]):
    """A walk that changes nothing: every job, in order, tried."""

    def jobs(self, ordered: Iterable[J]) -> Iterable[J]:
        return ordered

    def hold(self, job: J) -> PendingReason | None:
        return None

    def placed(self, job: J) -> None:
        return None


class BorrowLast:
    """``borrow-last``: jobs that would borrow go after every other job of the cycle.

    A job that admission would let borrow idle capacity of another queue is
    set aside when its turn comes, and tried again, in the same order, after
    the last job that needs no borrowing: borrowing never takes what a
    queue's own jobs could use this cycle. Without quotas, nothing borrows.
    """

    name = "borrow-last"
    reserves = True

    def walk(self, borrows: Borrows[J] | None) -> Walk[J]:
        return _BorrowLastWalk(borrows) if borrows is not None else _Walk()


class _BorrowLastWalk(_Walk[J]):
    def __init__(self, borrows: Borrows[J]) -> None:
        self._borrows = borrows

    def jobs(self, ordered: Iterable[J]) -> Iterator[J]:
        deferred: list[J] = []
        borrows = self._borrows
        for job in ordered:  # asked at the job's turn: earlier placements count
            if borrows(job):
                deferred.append(job)
            else:
                yield job
        yield from deferred


class StrictFifo:
    """``strict-fifo``: once a job of a queue is blocked, no later job of it starts this cycle.

    The first job of each queue that is tried and not placed becomes the
    queue's head; every later job of that queue waits behind it, with a
    ``priority`` reason naming it. No EASY reservation is made (``reserves``).
    """

    name = "strict-fifo"
    reserves = False

    def walk(self, borrows: Borrows[J] | None) -> Walk[J]:
        return _StrictFifoWalk()


class _StrictFifoWalk(_Walk[J]):
    def __init__(self) -> None:
        self._heads: dict[str, int] = {}  # each queue's job tried and not (yet) placed

    def hold(self, job: J) -> PendingReason | None:
        head = self._heads.get(job.queue)
        if head is not None:
            return _behind(head)
        self._heads[job.queue] = job.id  # until it is placed
        return None

    def placed(self, job: J) -> None:
        self._heads.pop(job.queue, None)


def _behind(head: int) -> PendingReason:
    return PendingReason(
        "priority",
        f"strict FIFO: waits behind job {head}, the first blocked job of its queue",
        f"starts after job {head} does",
    )


STRATEGIES: dict[str, QueueingStrategy] = {s.name: s for s in (BorrowLast(), StrictFifo())}
"""Every queueing strategy, by name."""

DEFAULT: tuple[str, ...] = ("borrow-last",)
"""The strategies the server's cycle runs."""


def strategies(names: Sequence[str]) -> tuple[QueueingStrategy, ...]:
    """The strategies named, in order; ``ValueError`` naming an unknown one."""
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        known = ", ".join(STRATEGIES)
        raise ValueError(f"unknown queueing strategy {unknown[0]!r} (known: {known})")
    return tuple(STRATEGIES[n] for n in names)
