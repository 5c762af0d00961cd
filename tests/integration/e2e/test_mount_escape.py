"""The mount escape of issue 28, tried for real: a server, the real dockerd, real symlinks.

A job that may write under an allowed folder plants ``link -> /`` there; a
later job mounts ``<allowed>/link`` to read and write the host outside the
allowlist. The later job must fail before it runs, with the reason, and the
host file outside the allowlist must stay unread and unwritten.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, submit, wait_state

pytestmark = pytest.mark.docker
DONE = {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}
SECRET = "not for containers\n"


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """``allowed/`` (the allowlist, rw) and ``outside/secret`` (not in it)."""
    root = tmp_path.resolve() / "host"
    (root / "allowed").mkdir(parents=True)
    (root / "outside").mkdir()
    (root / "outside" / "secret").write_text(SECRET)
    return root


def escape_command(host: Path) -> list[str]:
    """Read the planted file through ``/host`` and try to write beside it."""
    outside = f"/host{host}/outside"
    return ["sh", "-c", f"cat {outside}/secret; echo pwned > {outside}/pwned; echo done"]


def start_server(make_server: Callable[..., ServerProcess], host: Path) -> ServerProcess:
    config: dict[str, Any] = {
        **FAST_CONFIG,
        "executor": {**FAST_CONFIG["executor"], "allowed_mounts": [f"{host}/allowed:rw"]},
    }
    return started(make_server(config=config))


def started(server: ServerProcess) -> ServerProcess:
    """Start, allowing for a slow start on a loaded machine."""
    server.start(wait=False)
    server.wait_healthy(timeout=120)
    return server


def assert_host_untouched(host: Path) -> None:
    assert (host / "outside" / "secret").read_text() == SECRET
    assert not (host / "outside" / "pwned").exists()
    assert os.listdir(host / "outside") == ["secret"]


def test_a_planted_symlink_to_root_cannot_be_mounted(
    make_server: Callable[..., ServerProcess], host: Path
) -> None:
    """Job 1 plants ``ln -sfn / link`` in the allowed folder; job 2 mounts ``link``."""
    api = start_server(make_server, host).api()
    plant = submit(
        api,
        image=TEST_IMAGE,
        command=["ln", "-sfn", "/", "/scratch/link"],
        mounts=[f"{host}/allowed:/scratch:rw"],
    )
    assert wait_state(api, plant, DONE)["state"] == "SUCCEEDED"
    assert os.readlink(host / "allowed" / "link") == "/"  # the plant worked on the host

    escape = submit(
        api,
        image=TEST_IMAGE,
        command=escape_command(host),
        mounts=[f"{host}/allowed/link:/host:rw"],
    )
    job = wait_state(api, escape, DONE)
    assert job["state"] == "FAILED"
    assert "resolves to /, outside the admin allowlist" in job["reason"]
    assert api.get(f"/v1/jobs/{escape}/logs").content == b""  # it never ran
    assert_host_untouched(host)


def test_a_symlink_planted_between_submit_and_launch_is_caught_at_launch(
    make_server: Callable[..., ServerProcess], host: Path
) -> None:
    """At submit ``allowed/later`` is a folder; before launch it becomes ``-> /``."""
    api = start_server(make_server, host).api()
    blocker = submit(api, image=TEST_IMAGE, command=["sleep", "300"], gpus=4)
    wait_state(api, blocker, {"RUNNING"})
    (host / "allowed" / "later").mkdir()
    escape = submit(
        api,
        image=TEST_IMAGE,
        command=escape_command(host),
        gpus=1,
        mounts=[f"{host}/allowed/later:/host:rw"],
    )
    assert wait_state(api, escape, {"PENDING"})["state"] == "PENDING"  # accepted, waits for a GPU
    (host / "allowed" / "later").rmdir()
    (host / "allowed" / "later").symlink_to("/")
    api.post(f"/v1/jobs/{blocker}/cancel").raise_for_status()

    job = wait_state(api, escape, DONE, timeout=90)
    assert job["state"] == "FAILED"
    assert "resolves to /, outside the admin allowlist" in job["reason"]
    assert_host_untouched(host)


def test_submit_refuses_rw_under_a_read_only_entry_naming_it(
    make_server: Callable[..., ServerProcess], host: Path
) -> None:
    config: dict[str, Any] = {
        **FAST_CONFIG,
        "executor": {**FAST_CONFIG["executor"], "allowed_mounts": [str(host / "allowed")]},
    }
    api = started(make_server(config=config)).api()
    response = api.post(
        "/v1/jobs", json={"image": TEST_IMAGE, "mounts": [f"{host}/allowed:/data:rw"]}
    )
    assert response.status_code == 422
    assert f"entry {host}/allowed, which is read-only" in response.json()["error"]["message"]
