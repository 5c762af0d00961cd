"""The controller lease: at most one controller per database, and a standby that takes over.

Two controllers on one database would both schedule, launch and finish jobs:
GPUs booked twice, jobs started twice. So ``gpudock server`` takes the
database's *controller lease* before it opens the store, and holds it for its
life:

* **SQLite**: an exclusive ``flock`` on ``<database>.controller`` (one host by
  nature). The kernel drops it when the process dies, ``kill -9`` included.
* **PostgreSQL**: a session advisory lock (``pg_try_advisory_lock``) on a
  connection of its own, from any host. PostgreSQL drops it when that session
  ends: at once for a process that died on a live host, and within about
  ``KEEPALIVE_S`` for a host that vanished (the session's TCP keepalives). A
  watcher checks the connection every ``WATCH_S`` seconds; after an outage it
  takes the lease again, and if another server took it meanwhile, this one
  stops (``on_lost``): it must not act beside the new controller.

A server started while another holds the lease is refused in one line naming
the holder (``LeaseHeld``), or with ``--standby`` waits for it and then starts
as the controller: the takeover of a killed leader.

On PostgreSQL the controller's store is fenced by the lease (``write_fence``):
each write checks, under the store's write lock, that this lease's session
still holds it. So a leader whose session was cut cannot write once a standby
has taken over, even before its watcher notices; until the watcher takes the
lease again, its writes wait as in an outage.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from gpudock.store.db import WriteFence

log = logging.getLogger("gpudock.lease")

LEASE_KEY = 0x67707564  # "gpud": the advisory lock of the lease (writes use another key)
WATCH_S = 2.0  # seconds between two checks of a PostgreSQL lease's connection
WAIT_S = 0.5  # seconds between two tries of a standby
KEEPALIVE_S = 9  # a vanished host's session ends within about this long (idle 5 + 2 x 2)
APP_NAME = "gpudock-controller"


class LeaseHeld(Exception):
    """Another server holds this database's controller lease; the message names it."""


class ControllerLease:
    """This process's controller lease on one database (module docstring). Use
    ``take`` (refuse or wait), then ``watch`` (PostgreSQL) and ``release``."""

    def __init__(self, db_url: str) -> None:
        url = make_url(db_url)
        self._sqlite = url.get_backend_name() == "sqlite"
        self._path = Path(f"{url.database}.controller") if self._sqlite else Path()
        self._pg_url = (
            "" if self._sqlite else url.set(drivername="postgresql").render_as_string(False)
        )
        self._fd: int | None = None
        self._conn: Any = None
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.me = f"pid {os.getpid()} on {socket.gethostname()}"

    # ------------------------------------------------------------------ take

    def take(
        self,
        standby: bool = False,
        stop: threading.Event | None = None,
        waiting: Callable[[], bool] | None = None,
    ) -> bool:
        """Hold the lease; ``LeaseHeld`` if another server holds it, or with ``standby``
        wait (one log line) until it is free. True once held; False if ``stop`` was set
        while waiting. ``waiting`` is called at each try while another server holds the
        lease, until it returns True (a follower's start: ``cli/server_cmd.py``).
        Database errors pass through, except while a standby waits."""
        said = away = joined = False
        while True:
            try:
                if self._try():
                    break
            except ConnectionError as exc:  # a waiting standby outlives a database outage
                if not said:
                    raise
                if not away:
                    log.warning("standby: the database does not answer (%s); still waiting", exc)
                away = True
                if _stopped(stop, WAIT_S):
                    return False
                continue
            away = False
            if not standby:
                raise LeaseHeld(
                    "another gpudock server runs the controller of this database "
                    f"({self._holder()}); stop it first, or start this one with --standby "
                    "to take over when it stops"
                )
            if not said:
                log.warning(
                    "standby: the controller of this database is %s; waiting", self._holder()
                )
                said = True
            if waiting is not None and not joined:
                joined = waiting()
            if _stopped(stop, WAIT_S):
                return False
        if said:
            log.warning("took over as the controller of this database")
        return True

    def _try(self) -> bool:
        if self._sqlite:
            return self._try_file()
        return self._try_pg()

    def _try_file(self) -> bool:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{self.me} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        self._fd = fd
        return True

    def _try_pg(self) -> bool:
        import psycopg

        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
            row = self._conn.execute("SELECT pg_try_advisory_lock(%s)", (LEASE_KEY,)).fetchone()
        except psycopg.OperationalError as exc:  # the server says "cannot open the database"
            if self._conn is not None:
                with contextlib.suppress(Exception):
                    self._conn.close()
            raise ConnectionError(str(exc).strip().splitlines()[0]) from None
        return bool(row and row[0])

    def _connect(self) -> Any:
        import psycopg

        conn = psycopg.connect(
            self._pg_url,
            autocommit=True,
            connect_timeout=5,
            application_name=f"{APP_NAME} {self.me}"[:63],
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=2,
        )
        # the server's side too: a session whose host vanished ends, and frees the lease
        for name, value in (("idle", 5), ("interval", 2), ("count", 2)):
            conn.execute(f"SET tcp_keepalives_{name} = {value}")
        return conn

    def _holder(self) -> str:
        """Who holds the lease, as well as can be told."""
        if self._sqlite:
            with contextlib.suppress(OSError):
                said = self._path.read_text().strip()
                if said:
                    return said
            return f"a process holding {self._path}"
        with contextlib.suppress(Exception):
            row = self._conn.execute(
                "SELECT a.application_name, a.client_addr, a.backend_start "
                "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 0 AND l.objid = %s "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND a.pid <> pg_backend_pid()",
                (LEASE_KEY,),
            ).fetchone()
            if row:
                name, addr, since = row
                where = f" from {addr}" if addr else ""
                return f"{name}{where}, connected since {since:%Y-%m-%d %H:%M:%S}"
        return "another session"

    def write_fence(self) -> WriteFence | None:
        """PostgreSQL: the fence that lets the controller's store write only while this
        lease's session holds the lease (``store.db.WriteFence``), closing the gap between
        an outage's end and the watcher's next check. SQLite: None (a ``flock`` is lost
        only with the process)."""
        if self._sqlite:
            return None
        return WriteFence(LEASE_KEY, self._backend_pid)

    def _backend_pid(self) -> int | None:
        conn = self._conn
        if conn is None or conn.closed:
            return None
        return int(conn.info.backend_pid)

    # ----------------------------------------------------------------- watch

    def watch(self, on_lost: Callable[[str], None]) -> None:
        """PostgreSQL: check the lease's connection every ``WATCH_S``; after an outage take
        the lease again, and call ``on_lost(why)`` once if another server took it."""
        if self._sqlite:
            return
        self._watcher = threading.Thread(
            target=self._watch, args=(on_lost,), name="gpudock-lease", daemon=True
        )
        self._watcher.start()

    def _watch(self, on_lost: Callable[[str], None]) -> None:
        down = False
        while not self._stop.wait(WATCH_S):
            try:
                if not down:
                    self._conn.execute("SELECT 1")
                    continue
                held = self._try_pg()
            except Exception:  # the database is away: the store's own lines say so
                if self._conn is not None:
                    with contextlib.suppress(Exception):
                        self._conn.close()
                down = True
                continue
            if held:
                down = False
                log.info("the controller lease is held again")
                continue
            why = f"another server took the controller lease ({self._holder()})"
            log.error("%s while the database was away: this controller stops", why)
            on_lost(why)
            return

    # --------------------------------------------------------------- release

    def release(self) -> None:
        """Give the lease back (also what the process's death does). Idempotent."""
        self._stop.set()
        if self._fd is not None:
            os.close(self._fd)  # the flock goes with the last descriptor
            self._fd = None
        if self._conn is not None:
            with contextlib.suppress(Exception):  # freed now, not when the session ends
                self._conn.execute("SELECT pg_advisory_unlock_all()")
            with contextlib.suppress(Exception):
                self._conn.close()  # the session ends: its advisory lock goes with it
            self._conn = None


def _stopped(stop: threading.Event | None, seconds: float) -> bool:
    """Wait ``seconds``; True if ``stop`` is set (at once, or meanwhile)."""
    if stop is None:
        time.sleep(seconds)
        return False
    return stop.wait(seconds)
