"""A lane of the runtime's worker threads, where work for GPUs goes first.

``ThreadPoolExecutor`` runs work strictly in submit order, so one launch of a
GPU job submitted behind 300 launches of CPU-only jobs would wait for all of
them while its GPUs sit idle. A ``Lane`` keeps a priority queue instead: work
submitted with ``first=True`` (the runtime's work for a job that holds GPUs)
runs before every queued work without it; within each rank, in submit order.
Running work is never interrupted.
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
    """``workers`` threads (started as work arrives) running submitted work by rank."""

    def __init__(self, name: str, workers: int) -> None:
        if workers < 1:
            raise ValueError("a lane needs at least one worker")
        self.name = name
        self.workers = workers
        self._queue: list[tuple[int, int, Callable[[], None], Future[None]]] = []
        self._order = itertools.count()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._idle = 0
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
            if self._idle == 0 and len(self._threads) < self.workers:
                thread = threading.Thread(
                    target=self._work, name=f"gpudock-{self.name}_{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()
            else:
                self._cond.notify()
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

    def _work(self) -> None:
        while True:
            with self._cond:
                self._idle += 1
                while not self._queue and not self._closed:
                    self._cond.wait()
                self._idle -= 1
                if not self._queue:
                    return  # closed and drained
                _, _, fn, future = heapq.heappop(self._queue)
            if not future.set_running_or_notify_cancel():
                continue
            try:
                fn()
            except BaseException as exc:  # kept in the future, as an executor would
                future.set_exception(exc)
            else:
                future.set_result(None)
