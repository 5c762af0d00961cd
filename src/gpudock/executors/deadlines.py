"""Deadlines for engine calls: each one returns, or raises ``EngineTimeout``, in time.

A socket read that blocks cannot be interrupted in Python, so each call runs
in a worker thread of this module while its caller waits at most the call's
deadline (``EngineCalls.run``). A call past its deadline is left to end in
its thread (the client's own socket timeout ends it later), and its caller
gets ``EngineTimeout`` at once. While such a late call about one container
still runs, every further call about that container fails at once with the
same error, instead of queueing behind it: a container the engine hangs on
ties up one thread, and each reconcile pass loses no time on it after the
first.

The workers are daemon threads, so a hung call never holds up the process's
exit. A worker starts when a call finds none idle, and retires after
``IDLE_SECONDS`` without work.
"""

from __future__ import annotations

import contextvars
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

from gpudock.executors.faults import EngineTimeout

T = TypeVar("T")

IDLE_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Deadlines:
    """Seconds the runtime waits for each kind of engine call (``Executor``)."""

    describe: float = 10.0
    """A ping, or describing one container (``inspect``)."""
    call: float = 30.0
    """The listing, a removal, a stop beyond its grace, one chunk of a log, opening
    an exec or the event stream."""
    launch: float = 390.0
    """One whole launch: create, pull (its own timeout) and start."""


@dataclass(frozen=True, slots=True)
class _Late:
    what: str
    since: float  # monotonic: when the call began
    future: Future[object]


class EngineCalls:
    """Runs engine calls with deadlines; one late call per key at most (module docstring)."""

    def __init__(self) -> None:
        self._workers = _Workers()
        self._lock = threading.Lock()
        self._late: dict[str, _Late] = {}

    def run(
        self, key: str, what: str, seconds: float, fn: Callable[[], T], target: str | None = None
    ) -> T:
        """``fn()``'s result (or exception) if it ends within ``seconds``; else
        ``EngineTimeout`` about ``target``. ``key`` names what a late call blocks
        (a container, or an engine-wide call); ``what`` words the call
        (``"describing container x"``)."""
        began = time.monotonic()
        with self._lock:
            late = self._late.get(key)
            if late is not None and not late.future.done():
                waited = began - late.since
                raise EngineTimeout(
                    f"the engine has not answered {late.what} for {waited:.0f}s", target=target
                )
        future = self._workers.submit(fn)
        try:
            return future.result(timeout=seconds)
        except TimeoutError:
            if not future.cancel():  # it runs: remember it until it ends
                with self._lock:
                    self._late[key] = _Late(what, began, future)  # type: ignore[arg-type]
                future.add_done_callback(lambda done: self._forget(key, done))
            raise EngineTimeout(
                f"the engine did not answer {what} within {seconds:g}s", target=target
            ) from None

    def _forget(self, key: str, done: object) -> None:
        """A late call ended: its key no longer blocks calls."""
        with self._lock:
            late = self._late.get(key)
            if late is not None and late.future is done:
                del self._late[key]

    def late(self) -> dict[str, float]:
        """Each key with a late call still running, and for how many seconds it has run."""
        now = time.monotonic()
        with self._lock:
            return {k: now - v.since for k, v in self._late.items() if not v.future.done()}


class _Workers:
    """Daemon threads taking calls from one queue; a new one when none is idle.

    ``_idle`` counts the workers waiting for a call less the calls queued for
    them, so a call never waits for a worker that is busy or about to retire.
    """

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue[tuple[Future[object], Callable[[], object]]]
        self._calls = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, fn: Callable[[], T]) -> Future[T]:
        future: Future[T] = Future()
        context = contextvars.copy_context()  # the caller's log fields (bind_job) go along
        with self._lock:
            spare = self._idle > 0
            if spare:
                self._idle -= 1
        self._calls.put((future, lambda: context.run(fn)))  # type: ignore[arg-type]
        if not spare:
            threading.Thread(target=self._work, name="gpudock-engine", daemon=True).start()
        return future

    def _work(self) -> None:
        while True:
            try:
                future, fn = self._calls.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # more idle workers than queued calls: retire
                        self._idle -= 1
                        return
                continue  # a call was queued for this worker: take it
            if future.set_running_or_notify_cancel():
                try:
                    result = fn()
                except BaseException as exc:  # handed to the caller
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            with self._lock:
                self._idle += 1
