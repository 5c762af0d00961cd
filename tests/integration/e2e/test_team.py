"""Running gpudock as a team on a real server: queue membership (403), the per-user
pending limit (429), `gpudock queues` standing, the token commands, and a bad config."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tests.integration.e2e.conftest import teardown
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, gpudock_bin, submit

pytestmark = pytest.mark.docker

QUEUES = {
    "groups": {"vision": ["alice", "bob"]},
    "queues": [
        {"name": "vision", "members": ["group:vision", "dave"], "max_pending_per_user": 2},
        {"name": "open"},
    ],
}
CONFIG = {**FAST_CONFIG, "scheduler": {"queues": QUEUES}}


@pytest.fixture
def team_server(
    make_server: Callable[..., ServerProcess], db_url: str, docker: Any
) -> Iterator[ServerProcess]:
    """A running server with the team's queues, on SQLite and on PostgreSQL."""
    server = make_server(db_url=db_url, config=CONFIG).start()
    yield server
    teardown(server, docker)  # before db_url drops the database


def token_for(server: ServerProcess, user: str) -> str:
    response = server.api().post("/v1/tokens", json={"user": user})
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


def error(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()["error"]
    return body


def job(queue: str, after_ok: int | None = None) -> dict[str, Any]:
    """A one-GPU job; with ``after_ok`` it stays PENDING while that job runs, and so
    counts against the pending limit."""
    spec = {"image": TEST_IMAGE, "command": ["true"], "gpus": 1, "queue": queue}
    return spec if after_ok is None else {**spec, "after_ok": [after_ok]}


def sleeper(api: httpx.Client) -> int:
    """A job of the caller's that runs until the test ends (in the open queue)."""
    return submit(api, image=TEST_IMAGE, command=["sleep", "300"], cpus=0.1, queue="open")


def test_members_submit_others_get_403_and_the_pending_limit_429(
    team_server: ServerProcess,
) -> None:
    server = team_server
    alice = server.api(token_for(server, "alice"))
    carol = server.api(token_for(server, "carol"))

    refused = error(carol.post("/v1/jobs", json=job("vision")), 403)
    assert refused == {
        "code": "Forbidden",
        "message": "user 'carol' is not a member of queue 'vision'; "
        "ask an admin to add you (or a group of yours) to its members",
        "field": None,
    }
    assert carol.get("/v1/jobs").json() == [], "nothing was stored"
    submit(carol, **job("open"))  # a queue without members is open to all
    submit(server.api(), **job("vision"))  # admins submit anywhere

    running = sleeper(alice)
    submit(alice, **job("vision", after_ok=running))
    submit(alice, **job("vision", after_ok=running))
    limited = error(alice.post("/v1/jobs", json=job("vision", after_ok=running)), 429)
    assert limited["code"] == "TooManyRequests"
    assert limited["message"] == (
        "queue 'vision' allows 2 pending jobs per user (max_pending_per_user) and user "
        "'alice' has 2; wait until some start, or cancel one"
    )
    assert len(alice.get("/v1/jobs", params={"queue": "vision"}).json()) == 2


def test_queues_shows_members_to_admins_and_standing_to_users(make_server: Any) -> None:
    server = make_server(config=CONFIG).start()
    alice_token = token_for(server, "alice")
    alice = server.api(alice_token)
    submit(alice, **job("vision", after_ok=sleeper(alice)))

    admin_view = server.api().get("/v1/queues").json()
    vision = next(q for q in admin_view["queues"] if q["name"] == "vision")
    assert vision["members"] == ["group:vision", "dave"]
    assert admin_view["groups"] == {"vision": ["alice", "bob"]}
    table = server.cli("queues").stdout
    assert "MEMBERS" in table and "group:vision,dave" in table
    assert "groups: vision=alice,bob" in table

    mine = server.api(alice_token).get("/v1/queues").json()
    vision = next(q for q in mine["queues"] if q["name"] == "vision")
    assert "members" not in vision and "groups" not in mine
    assert vision["you"] == {
        "user": "alice",
        "member": True,
        "may_submit": True,
        "pending": 1,
        "max_pending": 2,
    }
    users_table = server.cli("queues", token=alice_token).stdout
    assert "YOU" in users_table and "1/2 pending" in users_table
    assert "MEMBERS" not in users_table
    carol_table = server.cli("queues", token=token_for(server, "carol")).stdout
    assert "not a member" in carol_table


def test_token_commands_create_list_and_revoke(make_server: Any) -> None:
    server = make_server().start()
    secret = server.cli(
        "token", "create", "--user", "alice", "--name", "laptop", "--expires", "30d"
    ).stdout.strip()
    assert secret.startswith("gpd_")
    listed = server.cli("token", "list", "--user", "alice").stdout
    header = listed.splitlines()[0].split()
    assert header == ["ID", "NAME", "USER", "ROLE", "STATE", "CREATED", "EXPIRES", "LAST", "USED"]
    assert "laptop" in listed and "active" in listed and secret not in listed
    tokens = json.loads(server.cli("token", "list", "-o", "json").stdout)
    laptop = next(t for t in tokens if t["name"] == "laptop")
    lifetime = datetime.fromisoformat(laptop["expires_at"]) - datetime.fromisoformat(
        laptop["created_at"]
    )  # -o json times are ISO 8601 with a timezone
    assert lifetime.total_seconds() == pytest.approx(30 * 86400)
    assert all("token" not in t for t in tokens)

    own = server.cli("token", "list", token=secret).stdout
    assert "laptop" in own and "admin" not in own.split("\n", 1)[1]
    refused = server.cli("token", "create", "--user", "alice", token=secret, check=False)
    assert refused.returncode == 1 and "only an admin can create tokens" in refused.stderr

    assert (
        f"token {laptop['id']} of alice revoked"
        in server.cli("token", "revoke", str(laptop["id"]), token=secret).stdout
    )
    denied = server.cli("jobs", token=secret, check=False)
    assert denied.returncode == 1 and "token revoked at 20" in denied.stderr
    twice = server.cli("token", "revoke", str(laptop["id"]), check=False)
    assert twice.returncode == 1
    assert f"token {laptop['id']} was already revoked at" in twice.stderr

    zero = server.cli("token", "create", "--user", "bob", "--expires", "0", check=False)
    assert zero.returncode == 2 and "expires must be a positive duration" in zero.stderr
    for result in (refused, denied, twice, zero):
        assert "Traceback" not in result.stderr


def test_a_config_naming_an_unknown_group_is_refused_with_its_path(tmp_path: Path) -> None:
    config = tmp_path / "server.yaml"
    queues = {"groups": {"vision": ["alice"]}, "queues": [{"name": "q", "members": ["group:nlp"]}]}
    config.write_text(yaml.safe_dump({"scheduler": {"queues": queues}}))
    result = subprocess.run(
        [gpudock_bin(), "server", "--port", "1", "--config", str(config)],
        env={**os.environ, "GPUDOCK_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert (
        "scheduler.queues: queues[0].members[0]: queue 'q' names unknown group 'nlp' "
        "(declared groups: vision)"
    ) in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
