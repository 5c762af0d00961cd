"""Users' registry logins through the real API and store (SQLite and PostgreSQL):
each user sees and changes only their own, the password is stored encrypted and never
answered, and a launch picks the job owner's login, else the server config's."""

from __future__ import annotations

import logging
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from gpudock.config import ServerConfig
from gpudock.server import Server, build_server
from gpudock.services.registries import pull_login
from gpudock.vault import KEY_FILE

SECRET = "alice-s3cret-Pa55"
REGISTRY = "registry.example.com:5000"


@pytest.fixture
def server(tmp_path: Path, db_url: str) -> Iterator[Server]:
    """An in-process server (nothing runs in the background) on the real store, with a
    server config login for ``shared.example.com``."""
    password_file = tmp_path / "shared.pw"
    password_file.write_text("server-pw\n")
    config = ServerConfig.model_validate(
        {
            "executor": {
                "registries": {
                    "shared.example.com": {
                        "username": "puller",
                        "password_file": str(password_file),
                    }
                }
            }
        }
    )
    server = build_server(tmp_path / "home", config, db_url=db_url, emulate_gpus="1xH100-80GB")
    yield server
    server.ctx.shutdown()
    server.ctx.db.close()


def client(server: Server, token: str | None = None) -> TestClient:
    secret = token or (server.new_admin_token or "")
    return TestClient(server.app, headers={"Authorization": f"Bearer {secret}"})


def user(server: Server, name: str) -> TestClient:
    response = client(server).post("/v1/tokens", json={"user": name})
    assert response.status_code == 201, response.text
    return client(server, response.json()["token"])


def login(api: TestClient, registry: str, username: str, password: str) -> Any:
    return api.put(f"/v1/registries/{registry}", json={"username": username, "password": password})


def test_a_stored_login_is_listed_without_its_password_and_encrypted_at_rest(
    server: Server,
) -> None:
    alice = user(server, "alice")

    stored = login(alice, REGISTRY, "alice-ci", SECRET)
    listed = alice.get("/v1/registries")

    assert stored.status_code == 200, stored.text
    assert stored.json()["registry"] == REGISTRY and stored.json()["username"] == "alice-ci"
    assert [(x["registry"], x["username"]) for x in listed.json()] == [(REGISTRY, "alice-ci")]
    assert SECRET not in stored.text + listed.text
    with server.ctx.db.read() as session:
        secret = session.execute(text("SELECT secret FROM registry_credentials")).scalar_one()
    assert SECRET not in secret and server.ctx.vault is not None
    assert server.ctx.vault.decrypt(secret) == SECRET
    key = server.ctx.vault.path
    assert key.name == KEY_FILE and stat.S_IMODE(key.stat().st_mode) == 0o600


def test_each_user_sees_replaces_and_removes_only_their_own_login(server: Server) -> None:
    alice, bob = user(server, "alice"), user(server, "bob")
    login(alice, REGISTRY, "alice-ci", SECRET)

    assert bob.get("/v1/registries").json() == []
    assert client(server).get("/v1/registries").json() == []  # admins too: their own only
    gone = bob.delete(f"/v1/registries/{REGISTRY}")
    assert gone.status_code == 404
    assert gone.json()["error"]["message"] == f"you have no login to registry {REGISTRY}"

    login(alice, REGISTRY, "alice-2", "another")
    assert [x["username"] for x in alice.get("/v1/registries").json()] == ["alice-2"]
    assert alice.delete(f"/v1/registries/{REGISTRY}").status_code == 200
    assert alice.get("/v1/registries").json() == []


@pytest.mark.parametrize(
    ("registry", "message"),
    [
        ("myregistry", "is not a host[:port] as images name it"),
        ("registry.example.com:5000:1", "is not a host[:port] as images name it"),
        ("bad_host.example.com", "is not a host[:port] as images name it"),
    ],
)
def test_a_registry_that_is_not_a_host_is_refused_with_one_line(
    server: Server, registry: str, message: str
) -> None:
    response = login(user(server, "alice"), registry, "u", "p")

    assert response.status_code == 422
    error = response.json()["error"]
    assert message in error["message"] and "\n" not in error["message"]
    assert error["field"] == "registry"


def test_bad_usernames_and_passwords_get_a_422_naming_the_field(server: Server) -> None:
    alice = user(server, "alice")

    assert login(alice, REGISTRY, "a\nb", "p").json()["error"]["field"] == "username"
    assert login(alice, REGISTRY, "u", "").json()["error"]["field"] == "password"
    assert alice.get("/v1/registries").json() == []


def test_docker_hub_aliases_are_one_registry(server: Server) -> None:
    alice = user(server, "alice")

    assert login(alice, "Index.Docker.io", "a", "p").json()["registry"] == "docker.io"
    with server.ctx.db.read() as session:
        plan = pull_login(server.ctx, session, "alice", "library/ubuntu:24.04")
    assert plan.login is not None and plan.login.registry == "docker.io"


def test_a_launch_uses_the_owners_login_else_the_servers_never_another_users(
    server: Server,
) -> None:
    login(user(server, "alice"), REGISTRY, "alice-ci", SECRET)
    image = f"{REGISTRY}/team/model:1"

    with server.ctx.db.read() as session:
        alice = pull_login(server.ctx, session, "alice", image)
        bob = pull_login(server.ctx, session, "bob", image)
        shared = pull_login(server.ctx, session, "bob", "shared.example.com/x/y")
        public = pull_login(server.ctx, session, "bob", "quay.io/x/y")

    assert alice.login is not None and alice.always
    assert (alice.login.username, alice.login.owner) == ("alice-ci", "user alice")
    assert alice.login.auth_config()["password"] == SECRET
    assert SECRET not in repr(alice)
    assert bob.login is None and bob.always  # private: bob cannot use alice's cached pull
    assert shared.login is not None and shared.login.owner == "the server config"
    assert shared.login.auth_config()["password"] == "server-pw"
    assert public.login is None and not public.always


def test_a_login_the_key_cannot_open_is_ignored_with_a_warning(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    login(user(server, "alice"), REGISTRY, "alice-ci", SECRET)
    assert server.ctx.vault is not None
    server.ctx.vault.path.unlink()  # a new key is made: as after a lost home
    server.ctx.vault = type(server.ctx.vault)(server.ctx.vault.path)

    with caplog.at_level(logging.WARNING), server.ctx.db.read() as session:
        plan = pull_login(server.ctx, session, "alice", f"{REGISTRY}/team/model:1")

    assert plan.login is None and plan.always
    assert f"user alice's login to registry {REGISTRY} is ignored" in caplog.text
