"""The mount escape of issue 28, tried for real: a server, the real dockerd, real symlinks.

A job that may write under an allowed folder plants ``link -> /`` there; a
later job mounts ``<allowed>/link`` to read and write the host outside the
allowlist. The later job must fail before it runs, with the reason, and the
host file outside the allowlist must stay unread and unwritten.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.integration.e2e.conftest import teardown
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, submit, wait_state

pytestmark = pytest.mark.docker
DONE = {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}
SECRET = "not for containers\n"


@pytest.fixture(scope="module")
def policy_api(
    tmp_path_factory: pytest.TempPathFactory, docker: Any
) -> Iterator[tuple[httpx.Client, Path]]:
    """One server for the submit checks: ``allowed`` is a read-only (plain) entry."""
    host = tmp_path_factory.mktemp("policy").resolve()
    (host / "allowed").mkdir()
    (host / "outside").mkdir()
    config: dict[str, Any] = {
        **FAST_CONFIG,
        "executor": {**FAST_CONFIG["executor"], "allowed_mounts": [str(host / "allowed")]},
    }
    server = started(ServerProcess(host / "home", config=config))
    try:
        yield server.api(), host
    finally:
        teardown(server, docker)


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


# ------------------------------------------------ submit: one clear 422 each


@pytest.mark.parametrize(
    ("spec", "field", "text"),
    [
        (
            {"mounts": ["{host}/allowed:/data:rw"]},
            "mounts",
            "entry {host}/allowed, which is read-only",
        ),
        (
            {"mounts": ["{host}/outside:/data"]},
            "mounts",
            "not in the admin allowlist ({host}/allowed:ro)",
        ),
        (
            {"env": {"CUDA_VISIBLE_DEVICES": "0"}},
            "env",
            "env key 'CUDA_VISIBLE_DEVICES' is not allowed",
        ),
        (
            {"env": {"NVIDIA_MIG_CONFIG_DEVICES": "all"}},
            "env",
            "'NVIDIA_MIG_CONFIG_DEVICES' is not allowed",
        ),
        ({"env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env", "reserved for gpudock"),
        (
            {"env": {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility,graphics"}},
            "env",
            "'NVIDIA_DRIVER_CAPABILITIES' asks for graphics, beyond what this server allows "
            "(compute, utility)",
        ),
        ({"env": {"NVIDIA_DRIVER_CAPABILITIES": "all"}}, "env", "asks for compat32, display"),
        ({"env": {"NVIDIA_DRIVER_CAPABILITIES": "gpu"}}, "env", "unknown driver capabilities gpu"),
    ],
)
def test_submit_refuses_what_the_policy_forbids_naming_it(
    policy_api: tuple[httpx.Client, Path], spec: dict[str, Any], field: str, text: str
) -> None:
    api, host = policy_api
    body = {"image": TEST_IMAGE, **json.loads(json.dumps(spec).replace("{host}", str(host)))}
    response = api.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == field
    assert text.replace("{host}", str(host)) in error["message"]


def test_submit_accepts_a_narrower_capability_set_and_a_cuda_requirement(
    policy_api: tuple[httpx.Client, Path],
) -> None:
    api, host = policy_api
    env = {"NVIDIA_DRIVER_CAPABILITIES": "utility", "NVIDIA_REQUIRE_CUDA": "cuda>=12.0"}
    job = submit(api, image=TEST_IMAGE, command=["true"], env=env, mounts=[f"{host}/allowed:/d"])
    assert wait_state(api, job, DONE)["state"] == "SUCCEEDED"
