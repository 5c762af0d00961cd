"""Engine and session handling for SQLite (default) and PostgreSQL.

``Database.open(url)`` creates the engine, applies Alembic migrations and
returns a handle. ``db.write()`` and ``db.read()`` are the only ways to get a
session; ``write`` commits on success and rolls back on error.

SQLite runs in WAL mode. pysqlite's own transaction handling is disabled so
that SQLAlchemy emits ``BEGIN`` itself: write transactions use
``BEGIN IMMEDIATE`` (they take the write lock up front and wait for it under
``busy_timeout`` instead of failing on a lock upgrade), read transactions a
plain ``BEGIN``. Writers take turns first within their process (a lock) and
then across the processes on the file (``flock`` on ``<file>.writer``; the
server's API workers and its controller), so at most one of them waits in
SQLite's busy handler. On PostgreSQL every write transaction first takes one
advisory transaction lock, so writers commit one at a time there too, from
any process on any host: event log ids (``store/events.py``) then become
visible in id order, and a reader paging by id never skips one. Never make
network calls while a session is open.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from gpudock.home import default_home as default_home  # re-exported for callers

log = logging.getLogger("gpudock.store")

_MIGRATIONS = Path(__file__).parent / "migrations"
_WRITE_LOCK = 0x6770_7564_6F63  # PostgreSQL advisory lock key held by every write transaction


class Availability:
    """Whether the database answers, as last seen; one log line per change, never a trace.

    ``failed`` (an outage error, from anyone who met one) logs ``database
    unavailable (...)`` when it was up; ``answered(started)`` (a statement
    that just ran, from the engine itself) logs ``database reachable again
    after N s`` when it was down and the statement *began* after the outage
    was noticed: one that was already under way when the database went away
    proves nothing. So a step that did not touch the database never says it
    is back, and a thousand failing requests say it is down once.
    """

    def __init__(self) -> None:
        self._down_since: float | None = None
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def failed(self, error: BaseException) -> None:
        if isinstance(error, LeaseLost):  # the database answers: the lease's wait is logged
            return  # by ``Database`` itself, once
        with self._lock:
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        log.warning(
            "database unavailable (%s); requests answer 503 and background work waits "
            "until it answers",
            first,
        )

    def answered(self, started: float) -> None:
        """A statement that began at ``started`` (``time.monotonic()``) succeeded."""
        if self._down_since is None:  # the common case: no lock
            return
        with self._lock:
            since = self._down_since
            if since is None or started <= since:
                return
            self._down_since = None
        log.warning("database reachable again after %.0f s", time.monotonic() - since)


class LeaseLost(Exception):
    """A fenced write refused: this process does not hold the lease its writes need now
    (``WriteFence``). Like an outage, it passes: the lease is taken again, or the
    process stops (``runtime/lease.py``)."""


@dataclass(frozen=True)
class WriteFence:
    """Only the holder of a PostgreSQL session advisory lock may write (the controller
    lease): each write transaction, once it holds the write lock, checks that the
    session ``holder()`` names (a backend pid; None: none now) still holds lock ``key``.
    A writer that lost the lease cannot write after its successor took it: writes are
    serialised by the write lock, so one that passed the check commits before any of
    the successor's."""

    key: int
    holder: Callable[[], int | None]


class Database:
    """A migrated database and the sessions onto it; ``availability`` tracks outages.
    ``fence`` (PostgreSQL, the controller's process): see ``WriteFence``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.availability = Availability()
        event.listen(engine, "before_cursor_execute", self._started)
        event.listen(engine, "after_cursor_execute", self._answered)
        event.listen(engine, "handle_error", self._failed)
        self._sessions = sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)
        self.is_sqlite = engine.dialect.name == "sqlite"
        # SQLite: this process's writers take turns here, then with other processes'
        self._write_turn: AbstractContextManager[object] = (
            threading.Lock() if self.is_sqlite else nullcontext()
        )
        path = engine.url.database if self.is_sqlite else None
        self._file_lock = FileTurn(Path(f"{path}.writer")) if path and path != ":memory:" else None
        self._file_turn: AbstractContextManager[object] = self._file_lock or nullcontext()
        self._writing = threading.local()  # .active: this thread is inside ``write``
        self.fence: WriteFence | None = None
        self._fenced_out = False  # the last fenced write was refused
        self._fence_lock = threading.Lock()

    @classmethod
    def open(cls, url: str, migrate: bool = True) -> Database:
        """Connect to ``url`` and bring the schema to the newest revision."""
        engine = make_engine(url)
        db = cls(engine)
        if migrate:
            db.migrate()
        return db

    def migrate(self, revision: str = "head") -> None:
        """Apply every pending Alembic migration up to ``revision`` (idempotent).

        Only tests name an older ``revision``, to check an upgrade from it.
        """
        cfg = _alembic_config()
        with self.engine.begin() as conn:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, revision)

    def at_head(self) -> bool:
        """The schema is at this code's newest revision: a process that does not migrate
        (a follower) may use it. False for an older schema, a newer one, or none."""
        heads = set(ScriptDirectory.from_config(_alembic_config()).get_heads())
        with self.engine.connect() as conn:
            return set(MigrationContext.configure(conn).get_current_heads()) == heads

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session in one write transaction: committed on success.

        On SQLite the process's writers first queue on one in-process lock, and
        then on a file lock shared with the other processes on the database, so
        only one writer at a time waits in ``BEGIN IMMEDIATE``: SQLite's busy
        handler polls with sleeps of up to 100 ms, which under many concurrent
        writers (a submit storm) costs far more than the writes themselves.
        Write transactions never nest: a thread that opens one inside another
        gets ``RuntimeError`` at once (it would otherwise wait for itself).
        """
        if getattr(self._writing, "active", False):
            raise RuntimeError("write transactions never nest: this thread already holds one")
        with self._write_turn, self._file_turn, self._sessions() as session:
            self._writing.active = True
            try:
                if self.is_sqlite:
                    session.connection(execution_options={"gpudock_immediate": True})
                else:  # one writer at a time, as on SQLite: event ids commit in id order
                    session.execute(
                        text("SELECT pg_advisory_xact_lock(:key)"), {"key": _WRITE_LOCK}
                    )
                    if self.fence is not None:
                        self._fenced(session, self.fence)
                try:
                    yield session
                    session.commit()
                except BaseException:
                    session.rollback()
                    raise
            finally:
                self._writing.active = False

    def _fenced(self, session: Session, fence: WriteFence) -> None:
        """The fence's check, under the write lock (``WriteFence``); ``LeaseLost`` if it fails."""
        holder = fence.holder()
        held = (
            holder is not None
            and session.execute(_FENCED, {"lease": fence.key, "pid": holder}).scalar_one()
        )
        with self._fence_lock:  # one line when writes start waiting, one when they resume
            was_out, self._fenced_out = self._fenced_out, not held
        if held:
            if was_out:
                log.info("the controller lease is held again: controller writes resume")
            return
        if not was_out:
            log.warning(
                "controller writes wait: this server's controller lease session is gone; "
                "they resume once it holds the lease again (or it stops, if another took it)"
            )
        raise LeaseLost("this server does not hold the controller lease now; not writing")

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads; anything written is rolled back."""
        with self._sessions() as session:
            try:
                yield session
            finally:
                session.rollback()

    @contextmanager
    def rows(self) -> Iterator[Connection]:
        """A Core connection for reads of plain rows: no session and no ORM objects, so a
        hot read (the API's job listing) costs a third of ``read``'s. Rolled back at
        the end; outages are tracked as for sessions."""
        with self.engine.connect() as conn:
            yield conn

    def close(self) -> None:
        self.engine.dispose()
        if self._file_lock is not None:
            self._file_lock.close()

    @staticmethod
    def _started(
        conn: Any, cursor: Any, statement: Any, params: Any, context: Any, *_: Any
    ) -> None:
        if context is not None:
            context.gpudock_started = time.monotonic()

    def _answered(
        self, conn: Any, cursor: Any, statement: Any, params: Any, context: Any, *_: Any
    ) -> None:
        started = getattr(context, "gpudock_started", None)
        if started is not None:
            self.availability.answered(started)

    def _failed(self, context: Any) -> None:
        if getattr(context, "is_pre_ping", False):
            return  # a pooled connection found dead at checkout: the pool reconnects
        error = context.sqlalchemy_exception or context.original_exception
        if error is not None and (database_unavailable(error) or context.is_disconnect):
            self.availability.failed(error)


class FileTurn:
    """An exclusive ``flock`` on ``path`` (made on first use), held inside ``with``.

    The kernel wakes the next waiter as soon as the holder unlocks (or dies:
    a killed process never leaves it held). One open file per instance, so
    the caller keeps its own threads out (``Database._write_turn``): ``flock``
    does not order the threads of one process.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> FileTurn:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *_: object) -> None:
        assert self._fd is not None
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


_FENCED = text(
    "SELECT EXISTS (SELECT 1 FROM pg_locks "
    "WHERE locktype = 'advisory' AND granted AND classid = 0 AND objid = :lease "
    "AND objsubid = 1 AND pid = :pid "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))"
)


def _alembic_config() -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


def database_unavailable(error: BaseException) -> bool:
    """True when ``error`` means the database cannot be reached or used right now.

    Connection refused or dropped, a pool timeout, or SQLite's lock or I/O
    errors: the same request may succeed once the database is back. So may a
    fenced write (``LeaseLost``) once the lease is held again. Integrity errors
    and programming errors are not outages.
    """
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    return isinstance(
        error, (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError, LeaseLost)
    )


def make_engine(url: str) -> Engine:
    """Create an engine; SQLite gets WAL, a busy timeout and explicit BEGINs."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=10)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
    event.listen(engine, "connect", _sqlite_on_connect)
    event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # let SQLAlchemy emit BEGIN itself
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def _sqlite_on_begin(conn: Any) -> None:
    immediate = conn.get_execution_options().get("gpudock_immediate", False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def default_url(home: Path) -> str:
    return f"sqlite:///{home / 'gpudock.db'}"
