"""``TokenWatch`` on the real store (SQLite and PostgreSQL): sessions end with their token.

Two watchers on two database handles stand for two server processes sharing
one database; the revocation comes through a third. Nothing but the database
connects them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gpudock.config import ServerConfig
from gpudock.server import Server, build_server
from gpudock.services.auth import AuthService, end_reason, token_ended
from gpudock.services.token_watch import TokenWatch
from gpudock.store import tokens as token_store
from gpudock.store.db import Database
from gpudock.store.tokens import Principal

WITHIN = 1.0


@pytest.fixture
def server(tmp_path: Path, db_url: str) -> Iterator[Server]:
    server = build_server(tmp_path, ServerConfig(), db_url=db_url, emulate_gpus="1xH100-80GB")
    yield server
    server.ctx.shutdown()
    server.ctx.db.close()


def alice(server: Server, expires: str | None = None) -> Principal:
    admin = Principal("admin", True)
    _, secret = AuthService(server.ctx).create_token(admin, "alice", expires=expires)
    return AuthService(server.ctx).authenticate_token(secret)


class Ended:
    def __init__(self) -> None:
        self.event = threading.Event()
        self.reasons: list[str] = []

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)
        self.event.set()


def test_a_revocation_ends_the_sessions_of_every_process_and_no_others(
    server: Server, db_url: str
) -> None:
    principal, other = alice(server), alice(server)
    assert principal.token_id is not None and principal == other  # equal users, two tokens
    processes = [server.ctx, replace(server.ctx, db=Database.open(db_url))]
    watches = [TokenWatch(ctx, interval=0.1) for ctx in processes]
    ended = [Ended() for _ in watches]
    spared = Ended()
    held = [w.watch(principal, e) for w, e in zip(watches, ended, strict=True)]
    watches[0].watch(other, spared)
    time.sleep(0.3)
    assert not any(e.event.is_set() for e in ended)  # active: nothing ends

    AuthService(server.ctx).revoke(Principal("admin", True), principal.token_id)
    revoked = time.monotonic()
    for e in ended:
        assert e.event.wait(5)
    assert time.monotonic() - revoked <= WITHIN
    assert [e.reasons for e in ended] == [["token revoked"], ["token revoked"]]
    assert [h.reason for h in held] == ["token revoked", "token revoked"]
    assert not spared.event.is_set()
    for watch in watches:
        watch.close()
    processes[1].db.close()


def test_an_expiry_ends_a_session_by_the_servers_clock_and_a_cancelled_watch_never_ends(
    server: Server,
) -> None:
    now = [time.time()]
    server.ctx.clock = lambda: now[0]
    principal = alice(server, expires="1h")
    watch = TokenWatch(server.ctx, interval=0.05)
    ended, cancelled = Ended(), Ended()
    watch.watch(principal, ended)
    watch.watch(principal, cancelled).cancel()
    time.sleep(0.2)
    assert not ended.event.is_set()
    now[0] += 3600
    assert ended.event.wait(5) and ended.reasons == ["token expired"]
    time.sleep(0.2)
    assert cancelled.reasons == []
    watch.close()


def test_the_one_read_check_says_why_a_token_no_longer_holds(server: Server) -> None:
    principal = alice(server, expires="1h")
    assert principal.token_id is not None and principal.expires_at is not None
    with server.ctx.db.read() as session:
        assert token_ended(session, principal.token_id, time.time()) is None
        assert token_ended(session, principal.token_id, principal.expires_at) == "token expired"
        assert token_ended(session, 999_999, time.time()) == "token revoked"  # no such row
    with server.ctx.db.write() as session:
        token_store.revoke(session, principal.token_id, time.time())
    with server.ctx.db.read() as session:
        assert token_ended(session, principal.token_id, principal.expires_at) == "token revoked"
    assert end_reason(None, None, 0) is None
