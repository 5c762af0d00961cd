"""Private registries end to end: a real registry with htpasswd logins, a real server,
the real dockerd. A user's own login pulls only that user's jobs; a user without one
fails with a reason naming the registry, even once the image is cached; the server
config's login pulls for everyone; and no password shows in the server log, the
job's events, the API's answers or the CLI's output."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.registry import PrivateRegistry, private_registry
from tests.kit.server import FAST_CONFIG, ServerProcess, submit, wait_state

pytestmark = pytest.mark.docker

ALICE_PW = "alice-Reg1stry-pw-7f3a"
SERVER_PW = "server-Reg1stry-pw-91c2"
REPOSITORY = "gpudock-test/busybox:latest"


@pytest.fixture
def registry(docker: Any, tmp_path: Path) -> Iterator[PrivateRegistry]:
    """A registry holding the test image, for the logins ``alice`` and ``puller``."""
    users = {"alice": ALICE_PW, "puller": SERVER_PW}
    with private_registry(tmp_path / "registry", users) as reg:
        image = reg.push(docker, TEST_IMAGE, REPOSITORY, "alice", ALICE_PW)
        yield reg
        reg.forget(docker, image)


def token_for(server: ServerProcess, user: str) -> str:
    response = server.api().post("/v1/tokens", json={"user": user})
    assert response.status_code == 201, response.text
    return str(response.json()["token"])


def run_job(server: ServerProcess, token: str, image: str) -> dict[str, Any]:
    api = server.api(token)
    job_id = submit(api, image=image, command=["echo", "pulled"], gpus=0)
    job = wait_state(api, job_id, {"SUCCEEDED", "FAILED"}, timeout=90)
    detail: dict[str, Any] = api.get(f"/v1/jobs/{job_id}").json()
    return {**job, "text": api.get(f"/v1/jobs/{job_id}").text, "events": detail["events"]}


def test_a_users_login_pulls_only_their_jobs_and_is_never_shown(
    make_server: Callable[..., ServerProcess], registry: PrivateRegistry, docker: Any
) -> None:
    server = make_server().start()
    alice, bob = token_for(server, "alice"), token_for(server, "bob")
    image = registry.ref(REPOSITORY)
    login = server.cli(
        "registry", "login", registry.host, "-u", "alice", "--password-stdin",
        token=alice, stdin=ALICE_PW + "\n",
    )  # fmt: skip
    listed = server.cli("registry", "list", token=alice)

    refused = run_job(server, bob, image)  # nobody has pulled it yet
    pulled = run_job(server, alice, image)
    refused_cached = run_job(server, bob, image)  # now cached by alice's pull

    assert f"logged in to {registry.host} as alice" in login.stderr
    assert registry.host in listed.stdout and "alice" in listed.stdout
    assert pulled["state"] == "SUCCEEDED", pulled
    for job in (refused, refused_cached):
        assert job["state"] == "FAILED"
        assert f"registry {registry.host} refused a pull without a login" in job["reason"]
        assert f"gpudock registry login {registry.host}" in job["reason"]
    answers = [
        login.stdout + login.stderr,
        listed.stdout,
        server.api(alice).get("/v1/registries").text,
        *(str(job) for job in (refused, pulled, refused_cached)),
        server.api().get("/v1/events").text,
    ]
    assert all(ALICE_PW not in text for text in answers)
    assert ALICE_PW not in server.log_all()


def test_the_server_configs_login_pulls_for_every_user(
    make_server: Callable[..., ServerProcess], registry: PrivateRegistry, tmp_path: Path
) -> None:
    password_file = tmp_path / "registry.pw"
    password_file.write_text(SERVER_PW + "\n")
    executor = {
        **FAST_CONFIG["executor"],
        "registries": {registry.host: {"username": "puller", "password_file": str(password_file)}},
    }
    server = make_server(config={**FAST_CONFIG, "executor": executor}).start()

    jobs = [run_job(server, token_for(server, user), registry.ref(REPOSITORY)) for user in "xy"]

    assert [job["state"] for job in jobs] == ["SUCCEEDED", "SUCCEEDED"], jobs
    assert all(SERVER_PW not in str(job) for job in jobs)
    assert SERVER_PW not in server.log_all()


def test_a_wrong_login_fails_the_job_naming_whose_login_was_refused(
    make_server: Callable[..., ServerProcess], registry: PrivateRegistry
) -> None:
    server = make_server().start()
    carol = token_for(server, "carol")
    response = server.api(carol).put(
        f"/v1/registries/{registry.host}", json={"username": "alice", "password": "not-it-123"}
    )
    assert response.status_code == 200, response.text

    job = run_job(server, carol, registry.ref(REPOSITORY))

    assert job["state"] == "FAILED"
    assert f"registry {registry.host} refused the login of user carol" in job["reason"]
    assert "not-it-123" not in job["text"] and "not-it-123" not in server.log_all()
