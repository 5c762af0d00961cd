"""The controller lease (``runtime/lease.py``) on real SQLite and PostgreSQL: one holder
per database, a refusal that names it, a standby that waits for it, and (PostgreSQL) a
holder that takes it again after its session was cut, or stops when another took it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import text

from gpudock.runtime import lease as lease_module
from gpudock.runtime.lease import ControllerLease, LeaseHeld
from gpudock.store.db import Database, LeaseLost, database_unavailable


@pytest.fixture
def leases() -> Iterator[list[ControllerLease]]:
    made: list[ControllerLease] = []
    yield made
    for held in made:
        held.release()


def lease(url: str, made: list[ControllerLease], name: str = "") -> ControllerLease:
    """A lease on ``url``; ``name`` is who it says holds it (all of them are in this one
    process, whose pid and host would name them alike)."""
    made.append(ControllerLease(url))
    made[-1].me = name or f"controller {len(made)}"
    return made[-1]


def waiting(standby: ControllerLease) -> tuple[threading.Thread, threading.Event]:
    """``standby.take(standby=True)`` in a thread of its own, and the event set once it
    holds the lease."""
    taken = threading.Event()
    waiter = threading.Thread(target=lambda: (standby.take(standby=True), taken.set()))
    waiter.start()
    return waiter, taken


def admin_connect(url: str) -> psycopg.Connection[tuple[object, ...]]:
    """A plain psycopg connection to the test's database (the test's own session)."""
    return psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)


def test_a_second_holder_is_refused_naming_the_first_and_gets_it_once_released(
    db_url: str, leases: list[ControllerLease]
) -> None:
    first = lease(db_url, leases)
    first.take()
    second = lease(db_url, leases)
    with pytest.raises(LeaseHeld) as refused:
        second.take()
    said = str(refused.value)
    assert said.startswith("another gpudock server runs the controller of this database (")
    assert first.me in said, said
    first.release()
    second.take()  # free again: no wait, no refusal


def test_a_standby_waits_until_the_holder_lets_go(
    db_url: str, leases: list[ControllerLease]
) -> None:
    first = lease(db_url, leases)
    first.take()
    standby = lease(db_url, leases)
    waiter, taken = waiting(standby)
    assert not taken.wait(1.5), "the standby took a lease that was held"
    first.release()
    assert taken.wait(5), "the standby did not take the freed lease"
    waiter.join()


def _sessions(url: str, name: str, holding: bool = False) -> set[int]:
    """The backend pids of the test database's sessions of a lease named ``name``
    (``holding``: those that hold the lease)."""
    query = (
        "SELECT a.pid FROM pg_stat_activity a WHERE a.datname = current_database() "
        "AND a.application_name LIKE %s"
    )
    if holding:
        query += (
            " AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.granted "
            "AND l.locktype = 'advisory' AND l.classid = 0 AND l.objid = %s)"
        )
    args: tuple[object, ...] = (f"%{name}%", lease_module.LEASE_KEY) if holding else (f"%{name}%",)
    with admin_connect(url) as conn:
        return {int(row[0]) for row in conn.execute(query, args).fetchall()}


def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _cut(url: str) -> None:
    """End every other session of the test's database holding the lease (an outage as
    the holder sees it)."""
    with admin_connect(url) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l "
            "WHERE l.locktype = 'advisory' AND l.objid = %s AND l.classid = 0 "
            "AND l.pid <> pg_backend_pid()",
            (lease_module.LEASE_KEY,),
        )


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_after_its_session_is_cut_the_holder_takes_the_lease_again(
    db_url: str, leases: list[ControllerLease], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lease_module, "WATCH_S", 0.2)
    holder = lease(db_url, leases, "the leader")
    holder.take()
    lost: list[str] = []
    holder.watch(lost.append)
    before = _sessions(db_url, "the leader", holding=True)
    assert len(before) == 1
    _cut(db_url)
    _until(
        lambda: bool(_sessions(db_url, "the leader", holding=True) - before),
        10,
        "the lease taken again in a new session",
    )
    with pytest.raises(LeaseHeld):
        lease(db_url, leases).take()
    assert not lost


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_holder_whose_lease_was_taken_meanwhile_stops(
    db_url: str, leases: list[ControllerLease], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watcher finds the session gone at one check and tries again at the next: a
    successor that takes the lease in between wins it (a check every second leaves it
    at least that long)."""
    monkeypatch.setattr(lease_module, "WATCH_S", 1.0)
    holder = lease(db_url, leases)
    holder.take()
    lost: list[str] = []
    stopped = threading.Event()
    holder.watch(lambda why: (lost.append(why), stopped.set()))
    _cut(db_url)
    successor = lease(db_url, leases)
    successor.take()  # before the holder's watcher tries again
    assert stopped.wait(5), "the old holder did not learn it lost the lease"
    assert lost[0].startswith("another server took the controller lease (")
    assert successor.me in lost[0]


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_waiting_standby_outlives_its_session_being_cut(
    db_url: str, leases: list[ControllerLease]
) -> None:
    first = lease(db_url, leases, "the leader")
    first.take()
    standby = lease(db_url, leases, "the standby")
    waiter, taken = waiting(standby)
    _until(lambda: bool(_sessions(db_url, "the standby")), 10, "the standby's session")
    with admin_connect(db_url) as conn:
        cut = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name LIKE %s",
            ("%the standby%",),
        ).fetchone()
    assert cut == (1,)
    time.sleep(1.0)  # the standby's next tries: the cut session, then a new one
    assert waiter.is_alive() and not taken.is_set()
    first.release()
    assert taken.wait(5), "the standby did not take the freed lease after its outage"
    waiter.join()


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_fenced_store_writes_only_while_its_lease_is_held(
    db_url: str, leases: list[ControllerLease], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gap the watcher leaves (it checks every ``WATCH_S``): once the holder's session
    is cut and a successor holds the lease, the old holder's store refuses to write, at
    once, as in an outage; when the lease is its own again, it writes again."""
    monkeypatch.setattr(lease_module, "WATCH_S", 3600.0)  # no watcher: only the fence acts
    holder = lease(db_url, leases, "the leader")
    holder.take()
    store = Database.open(db_url)
    store.fence = holder.write_fence()
    try:
        with store.write() as session:
            session.execute(text("SELECT 1"))  # holding the lease: written
        _cut(db_url)
        successor = lease(db_url, leases, "the successor")
        successor.take()
        with pytest.raises(LeaseLost) as refused, store.write() as session:
            session.execute(text("SELECT 1"))
        assert database_unavailable(refused.value), "a fenced write passes like an outage"
        successor.release()
        with pytest.raises(ConnectionError):
            holder.take()  # finds its session cut (as its watcher would), and drops it
        holder.take()  # a new session of the old holder's: its fence follows it
        with store.write() as session:
            session.execute(text("SELECT 1"))
    finally:
        store.close()


def test_a_sqlite_lease_needs_no_fence(tmp_path: Path) -> None:
    holder = ControllerLease(f"sqlite:///{tmp_path / 'gpudock.db'}")
    assert holder.write_fence() is None
