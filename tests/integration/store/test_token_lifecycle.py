"""The token lifecycle through the real API and store (SQLite and PostgreSQL), with the
server's clock injected (``RuntimeContext.clock``): expiry, revocation, last use, rights."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from gpudock.config import ServerConfig
from gpudock.server import Server, build_server
from gpudock.store.db import Database

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00+00:00
DAY = 86400.0


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def server(tmp_path: Path, db_url: str) -> Iterator[Server]:
    """An in-process server (nothing runs in the background) on the real store."""
    server = build_server(tmp_path, ServerConfig(), db_url=db_url, emulate_gpus="1xH100-80GB")
    yield server
    server.ctx.shutdown()
    server.ctx.db.close()


@pytest.fixture
def clock(server: Server) -> FakeClock:
    fake = FakeClock(T0)
    server.ctx.clock = fake
    return fake


def client(server: Server, token: str | None = None) -> TestClient:
    secret = token or (server.new_admin_token or "")
    return TestClient(server.app, headers={"Authorization": f"Bearer {secret}"})


def create(server: Server, **body: Any) -> dict[str, Any]:
    response = client(server).post("/v1/tokens", json=body)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def error(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    message: str = response.json()["error"]["message"]
    return message


def test_a_token_expires_at_its_time_and_then_says_so(server: Server, clock: FakeClock) -> None:
    token = create(server, user="alice", name="laptop", expires="30d")
    assert (token["name"], token["expires_at"], token["state"]) == (
        "laptop",
        T0 + 30 * DAY,
        "active",
    )
    alice = client(server, token["token"])
    assert alice.get("/v1/jobs").status_code == 200
    clock.now = T0 + 30 * DAY - 1
    assert alice.get("/v1/jobs").status_code == 200
    clock.now = T0 + 30 * DAY
    assert error(alice.get("/v1/jobs"), 401) == "token expired at 2027-02-14T08:00:00+00:00"
    listed = client(server).get("/v1/tokens", params={"user": "alice"}).json()
    assert [(t["id"], t["state"]) for t in listed] == [(token["id"], "expired")]


def test_a_revoked_token_is_refused_saying_when_and_revoking_twice_conflicts(
    server: Server, clock: FakeClock
) -> None:
    token = create(server, user="bob")
    bob = client(server, token["token"])
    assert bob.get("/v1/jobs").status_code == 200
    clock.now = T0 + 90
    revoked = client(server).delete(f"/v1/tokens/{token['id']}")
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    assert error(bob.get("/v1/jobs"), 401) == "token revoked at 2027-01-15T08:01:30+00:00"
    assert error(client(server).delete(f"/v1/tokens/{token['id']}"), 409) == (
        f"token {token['id']} was already revoked at 2027-01-15T08:01:30+00:00"
    )
    assert error(client(server, "gpd_never-issued").get("/v1/jobs"), 401) == "invalid token"


def test_users_list_and_revoke_only_their_own_tokens_and_never_create(
    server: Server, clock: FakeClock
) -> None:
    laptop = create(server, user="alice", name="laptop")
    ci = create(server, user="alice", name="ci", expires="12h")
    other = create(server, user="bob")
    alice = client(server, laptop["token"])
    mine = alice.get("/v1/tokens").json()
    assert [t["name"] for t in mine] == ["laptop", "ci"]
    assert all("token" not in t and t["user"] == "alice" for t in mine), "never the secret"
    assert error(alice.get("/v1/tokens", params={"user": "bob"}), 403) == (
        "users may list only their own tokens, not 'bob''s"
    )
    assert error(alice.delete(f"/v1/tokens/{other['id']}"), 404) == (
        f"token {other['id']} not found"
    )
    assert alice.delete(f"/v1/tokens/{ci['id']}").status_code == 200
    assert error(alice.post("/v1/tokens", json={"user": "alice"}), 403) == (
        "only an admin can create tokens"
    )
    everyone = client(server).get("/v1/tokens").json()
    assert {t["user"] for t in everyone} == {"admin", "alice", "bob"}
    assert {t["name"]: t["state"] for t in everyone if t["user"] == "alice"} == {
        "laptop": "active",
        "ci": "revoked",
    }


@pytest.mark.parametrize(
    ("expires", "message"),
    [
        ("0", "expires must be a positive duration such as 30d, got '0'; leave it out"),
        (0, "expires must be a positive duration such as 30d, got 0;"),
        ("0d", "expires must be a positive duration"),
        ("-5d", "expires: expected a duration such as 90s"),
        ("soon", "expires: expected a duration such as 90s"),
        ("9999d", "expires must be at most 3650d (ten years), got '9999d'"),
    ],
)
def test_a_bad_expiry_is_refused(server: Server, expires: Any, message: str) -> None:
    response = client(server).post("/v1/tokens", json={"user": "alice", "expires": expires})
    assert message in error(response, 422)
    assert response.json()["error"]["field"] == "expires"


def test_last_use_is_written_at_most_once_a_minute(server: Server, clock: FakeClock) -> None:
    token = create(server, user="carol")
    carol = client(server, token["token"])

    def last_used() -> float | None:
        value: float | None = carol.get("/v1/tokens").json()[0]["last_used_at"]
        return value

    assert last_used() == T0
    clock.now = T0 + 59
    assert last_used() == T0, "not rewritten within the minute"
    clock.now = T0 + 60
    assert last_used() == T0 + 60


def test_the_last_active_admin_token_cannot_be_revoked(server: Server, clock: FakeClock) -> None:
    admin = client(server)
    first = admin.get("/v1/tokens").json()[0]
    assert (first["user"], first["admin"], first["expires_at"]) == ("admin", True, None)
    assert "is the last active admin token" in error(admin.delete(f"/v1/tokens/{first['id']}"), 409)
    second = create(server, user="ops", admin=True, name="ops")
    assert admin.delete(f"/v1/tokens/{first['id']}").status_code == 200
    assert error(admin.get("/v1/jobs"), 401).startswith("token revoked at")
    assert client(server, second["token"]).get("/v1/tokens").status_code == 200


def test_tokens_from_before_the_migration_keep_working(db_url: str, tmp_path: Path) -> None:
    database = Database.open(db_url, migrate=False)
    database.migrate("0005")
    with database.engine.begin() as conn:
        conn.execute(
            text(
                'INSERT INTO tokens (id, token_hash, "user", is_admin, created_at) '
                "VALUES (1, :hash, 'admin', true, 1.0)"
            ),
            {"hash": __import__("hashlib").sha256(b"gpd_old").hexdigest()},
        )
    database.close()
    server = build_server(tmp_path, ServerConfig(), db_url=db_url, emulate_gpus="1xH100-80GB")
    try:
        assert server.new_admin_token is None, "an active admin token exists already"
        listed = client(server, "gpd_old").get("/v1/tokens").json()
        assert [(t["id"], t["state"], t["expires_at"], t["name"]) for t in listed] == [
            (1, "active", None, None)
        ]
    finally:
        server.ctx.shutdown()
        server.ctx.db.close()
