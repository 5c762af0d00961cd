"""A lane of the runtime's worker threads, where work for GPUs goes first.

``ThreadPoolExecutor`` runs work strictly in submit order, so one launch of a
GPU job submitted behind 300 launches of CPU-only jobs would wait for all of
them while its GPUs sit idle. A ``Lane`` keeps a priority queue instead: work
submitted with ``first=True`` (the runtime's work for a job that holds GPUs)
runs before every queued work without it; within each rank, in submit order.
Such work may also use the lane's ``spare`` workers, which other work never
takes: it never waits for a backlog's running work to end either. Running
work is never interrupted.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from concurrent.futures import Future

FIRST, AFTER = 0, 1
"""Ranks: work for a job that holds GPUs, and any other work."""


class Lane:
    """Worker threads (started as work arrives) running submitted work by rank.

    At most ``workers`` run work submitted without ``first``; work with it may
    also use ``spare`` more threads, so it never waits for a worker that a
    backlog of other work holds.
    """

    def __init__(self, name: str, workers: int, spare: int = 0) -> None:
        if workers < 1 or spare < 0:
            raise ValueError("a lane needs at least one worker, and no fewer than 0 spare")
        self.name = name
        self.workers = workers
        self.spare = spare
        self._queue: list[tuple[int, int, Callable[[], None], Future[None]]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._running_after = 0  # work without ``first`` running now
        self._closed = False

    def submit(self, fn: Callable[[], None], *, first: bool = False) -> Future[None]:
        """Queue ``fn``; ``first``: ahead of every queued work submitted without it.

        The future holds ``fn``'s result or exception. ``RuntimeError`` after ``shutdown``.
        """
        future: Future[None] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError(f"lane {self.name} is shut down")
            rank = FIRST if first else AFTER
            heapq.heappush(self._queue, (rank, next(self._order), fn, future))
            if self._idle:
                self._cond.notify()  # any idle worker can take what any other can
            elif len(self._threads) < self.workers + self.spare:
                thread = threading.Thread(
                    target=self._work, name=f"gpudock-{self.name}_{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
        return future

    def queued(self) -> int:
        """Work waiting for a worker (not counting the work running)."""
        with self._cond:
            return len(self._queue)

    def shutdown(self) -> None:
        """Cancel the queued work, let the running work end, and stop the workers."""
        with self._cond:
            self._closed = True
            queued, self._queue = self._queue, []
            self._cond.notify_all()
            threads = list(self._threads)
        for *_, future in queued:
            future.cancel()
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join()

    def _takeable(self) -> bool:
        """Queued work a worker may start now; the caller holds ``_cond``."""
        if not self._queue:
            return False
        return self._queue[0][0] == FIRST or self._running_after < self.workers

    def _work(self) -> None:
        while True:
            with self._cond:
                self._idle += 1
                while not self._closed and not self._takeable():
                    self._cond.wait()
                self._idle -= 1
                if self._closed:
                    return  # shutdown cancelled what was queued
                rank, _, fn, future = heapq.heappop(self._queue)
                if rank == AFTER:
                    self._running_after += 1
            if future.set_running_or_notify_cancel():
                try:
                    fn()
                except BaseException as exc:  # kept in the future, as an executor would
                    future.set_exception(exc)
                else:
                    future.set_result(None)
            if rank == AFTER:
                with self._cond:
                    self._running_after -= 1
                    self._cond.notify()  # queued work without ``first`` may start now
