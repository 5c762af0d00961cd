"""End what a token opened when it dies: one watcher per server process.

Long-lived requests (exec, exec -it, logs --follow, the dashboard's session)
register their token here; one thread re-reads the rows of every watched
token each ``interval`` in one query (``token_store.lifetimes``, by primary
key) and hands each request whose token was revoked or has expired the
reason, once (``end_reason``). Nothing is kept in memory that another process
could change: a revocation made through any server process sharing the
database is seen by every process's watcher within one ``interval``::

    request ──watch(principal, on_end)──► TokenWatch ──every 0.25 s──► SELECT id,
       ▲                                      │          revoked_at, expires_at
       └── on_end("token revoked") ◄──────────┘          WHERE id IN (...)

``on_end`` runs on the watcher's thread and must only signal (close a
socket, set an event). While the database cannot be read, sessions stay
open: nothing can be revoked meanwhile either.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from gpudock.runtime.context import RuntimeContext
from gpudock.services.auth import end_reason
from gpudock.store import tokens as token_store
from gpudock.store.db import database_unavailable
from gpudock.store.tokens import Principal

log = logging.getLogger("gpudock.auth")

INTERVAL = 0.25  # seconds between two reads: a session ends well within 1 s of its token


@dataclass(eq=False)
class Watch:
    """One open request's hold on its token; ``reason`` once the token died."""

    token_id: int
    on_end: Callable[[str], None]
    reason: str | None = None
    _owner: TokenWatch | None = field(default=None, repr=False)

    def cancel(self) -> None:
        """The request ended by itself: stop watching. Idempotent."""
        if self._owner is not None:
            self._owner._forget(self)


class TokenWatch:
    """The watcher of one server process (``app.state.token_watch``); thread-safe."""

    def __init__(self, ctx: RuntimeContext, interval: float = INTERVAL) -> None:
        self.ctx = ctx
        self.interval = interval
        self._watches: set[Watch] = set()
        self._lock = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def watch(self, principal: Principal, on_end: Callable[[str], None]) -> Watch:
        """Call ``on_end(reason)`` once when ``principal``'s token is revoked or expires.

        A principal without a token (made in code) is never ended. The caller
        cancels the watch when its request ends first.
        """
        watch = Watch(principal.token_id or 0, on_end, _owner=self)
        if principal.token_id is None:
            return watch
        with self._lock:
            self._watches.add(watch)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(
                    target=self._run, name="gpudock-token-watch", daemon=True
                )
                self._thread.start()
            self._lock.notify_all()
        return watch

    def watch_async(self, principal: Principal) -> tuple[Watch, asyncio.Event]:
        """``watch`` for a coroutine: the event is set (on the running loop) when it ends."""
        loop, ended = asyncio.get_running_loop(), asyncio.Event()

        def on_end(_: str) -> None:
            loop.call_soon_threadsafe(ended.set)

        return self.watch(principal, on_end), ended

    def close(self) -> None:
        """Stop the thread; open watches are never ended after this."""
        with self._lock:
            self._stopped = True
            self._lock.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)

    def _forget(self, watch: Watch) -> None:
        with self._lock:
            self._watches.discard(watch)

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._watches and not self._stopped:
                    self._lock.wait()
                if self._stopped:
                    return
                watches = list(self._watches)
            self._check(watches)
            with self._lock:
                self._lock.wait(timeout=self.interval)

    def _check(self, watches: list[Watch]) -> None:
        """Read the watched tokens once; end the watches whose token died."""
        try:
            with self.ctx.db.read() as session:
                found = token_store.lifetimes(session, {w.token_id for w in watches})
        except Exception as exc:
            if database_unavailable(exc):
                self.ctx.db.availability.failed(exc)  # logged once per outage
            else:
                log.exception("cannot check the tokens of open sessions")
            return
        now = self.ctx.clock()
        for watch in watches:
            lifetime = found.get(watch.token_id)
            reason = "token revoked" if lifetime is None else end_reason(*lifetime, now)
            if reason is None:
                continue
            with self._lock:
                if watch not in self._watches:
                    continue  # cancelled meanwhile
                self._watches.discard(watch)
            watch.reason = reason
            try:
                watch.on_end(reason)
            except Exception:
                log.exception("ending a session of token %d failed", watch.token_id)
