"""The client commands against a real server: light imports, server-side spec errors, logs.

``gpudock --help`` and every client command must answer at once, so none of them may
load the server's libraries; ``logs`` on a job that has not started says why, and
``logs -f`` waits for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE, cleanup_containers
from tests.kit.server import TERMINAL, ServerProcess, submit, wait_for, wait_state

pytestmark = pytest.mark.docker

FORBIDDEN = (
    "sqlalchemy", "alembic", "fastapi", "starlette", "uvicorn", "docker", "numpy", "scipy",
    "matplotlib", "pydantic", "httpx", "yaml",
)  # fmt: skip

PROBE = """
import json, os, sys
sys.argv = ["gpudock", *json.loads(os.environ["PROBE_ARGS"])]
from gpudock.cli.main import main
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else 0
forbidden = json.loads(os.environ["PROBE_FORBIDDEN"])
loaded = sorted({m.split(".")[0] for m in sys.modules} & set(forbidden))
with open(os.environ["PROBE_OUT"], "w") as f:
    json.dump({"code": code, "loaded": loaded}, f)
"""


@pytest.fixture(scope="module")
def sqlite_server(docker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module (each test cancels what it started); slow starts allowed."""
    server = ServerProcess(tmp_path_factory.mktemp("cli-client") / "home").start(wait=False)
    server.wait_healthy(timeout=180)
    instance = server.api().get("/healthz").json()["instance"]
    yield server
    server.stop()
    cleanup_containers(docker, f"gpudock.instance={instance}")


@pytest.fixture(autouse=True)
def no_jobs_left(sqlite_server: ServerProcess) -> Iterator[None]:
    yield
    api = sqlite_server.api()
    for job in api.get("/v1/jobs", params={"limit": 1000}).json():
        if job["state"] not in TERMINAL:
            api.post(f"/v1/jobs/{job['id']}/cancel")
    for job in api.get("/v1/jobs", params={"limit": 1000}).json():
        wait_state(api, job["id"], TERMINAL)


def probe(server: ServerProcess, tmp_path: Path, *args: str) -> dict[str, Any]:
    """Run ``gpudock ARGS`` in a fresh interpreter; its exit code and forbidden modules."""
    result = tmp_path / "probe.json"
    env = {
        **server.env,
        "GPUDOCK_URL": server.url,
        "GPUDOCK_TOKEN": server.admin_token,
        "PROBE_ARGS": json.dumps(args),
        "PROBE_FORBIDDEN": json.dumps(FORBIDDEN),
        "PROBE_OUT": str(result),
    }
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120
    )
    assert result.exists(), done.stderr
    data: dict[str, Any] = json.loads(result.read_text())
    data["stdout"], data["stderr"] = done.stdout, done.stderr
    return data


def test_client_commands_load_nothing_of_the_server(
    sqlite_server: ServerProcess, tmp_path: Path
) -> None:
    server = sqlite_server
    api = server.api()
    running = submit(api, image=TEST_IMAGE, command=["sleep", "300"], gpus=4)
    wait_state(api, running, {"RUNNING"})
    waiting = submit(api, image=TEST_IMAGE, command=["true"], gpus=1)
    commands: list[tuple[str, ...]] = [
        ("--help",),
        ("jobs",),
        ("jobs", "-o", "json"),
        ("submit", "--gpus", "1", "--memory", "1GiB", TEST_IMAGE, "--", "true"),
        ("why", str(waiting)),
        ("show", str(waiting)),
        ("logs", str(waiting)),
        ("gpus",),
        ("nodes",),
        ("queues",),
        ("cancel", str(running)),
    ]
    for args in commands:
        seen = probe(server, tmp_path, *args)
        assert seen["code"] == 0, (args, seen["stderr"])
        assert seen["loaded"] == [], (args, seen["loaded"])
    assert wait_state(api, running, {"CANCELLED"})


def test_the_help_of_every_command_loads_nothing_of_the_server(
    sqlite_server: ServerProcess, tmp_path: Path
) -> None:
    """Also the heavy commands (``server``, ``simulate``): they import inside their body."""
    from gpudock.cli.main import app

    names = [c.name or c.callback.__name__ for c in app.registered_commands if c.callback]
    assert {"jobs", "submit", "logs", "server", "simulate"} <= set(names)
    for name in names:
        seen = probe(sqlite_server, tmp_path, name.replace("_", "-"), "--help")
        assert (name, seen["code"], seen["loaded"]) == (name, 0, [])


@pytest.mark.parametrize(
    ("args", "message", "code"),
    [
        (["--selector", "bad key=x"], "invalid job spec: node_selector: label key 'bad key'", 2),
        (
            ["--toleration", "spot:NoExecute"],
            "invalid job spec: tolerations: toleration 'spot:NoExecute': effect must be "
            "NoSchedule, got 'NoExecute'",
            2,
        ),
        (
            ["--topology", "pcie"],
            "invalid job spec: topology: Input should be 'nvlink' or 'numa'",
            2,
        ),
        (["--max-runtime", "nan"], "invalid job spec: max_runtime: duration must be a finite", 2),
        (
            ["--memory", "99999999999TiB"],
            "invalid job spec: memory: size '99999999999TiB' is too",
            2,
        ),
        (["--gpus", "64"], "job can never be scheduled: needs 64 GPUs", 1),  # valid, never runs
    ],
)
def test_the_server_rejects_a_bad_spec_in_one_line(
    sqlite_server: ServerProcess, args: list[str], message: str, code: int
) -> None:
    result = sqlite_server.cli("submit", *args, TEST_IMAGE, check=False)

    assert result.returncode == code, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert sqlite_server.api().get("/v1/jobs", params={"state": "PENDING"}).json() == []


def test_logs_of_a_pending_job_say_its_state_and_why(sqlite_server: ServerProcess) -> None:
    server = sqlite_server
    api = server.api()
    blocker = submit(api, image=TEST_IMAGE, command=["sleep", "300"], gpus=4)
    wait_state(api, blocker, {"RUNNING"})
    waiting = submit(api, image=TEST_IMAGE, command=["echo", "hello"], gpus=2)
    job = wait_for(
        lambda: (j := api.get(f"/v1/jobs/{waiting}").json())["pending_reasons"] and j,
        what="a pending reason",
    )

    result = server.cli("logs", str(waiting))

    assert result.stdout == ""
    reason = job["pending_reasons"][0]["message"]
    assert result.stderr.strip() == (
        f"job {waiting} is PENDING: {reason}; no logs yet (gpudock logs -f {waiting} waits for it)"
    )


def test_logs_follow_waits_for_the_job_to_start_then_streams_it(
    sqlite_server: ServerProcess,
) -> None:
    server = sqlite_server
    api = server.api()
    blocker = submit(api, image=TEST_IMAGE, command=["sleep", "300"], gpus=4)
    wait_state(api, blocker, {"RUNNING"})
    waiting = submit(api, image=TEST_IMAGE, command=["sh", "-c", "echo one; echo two"], gpus=2)
    env = {**server.env, "GPUDOCK_URL": server.url, "GPUDOCK_TOKEN": server.admin_token}
    follower = subprocess.Popen(
        [str(Path(sys.executable).parent / "gpudock"), "logs", "-f", str(waiting)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(2)
        assert follower.poll() is None, "logs -f returned before the job started"
        assert api.get(f"/v1/jobs/{waiting}").json()["state"] == "PENDING"
        assert api.post(f"/v1/jobs/{blocker}/cancel").status_code == 200
        stdout, stderr = follower.communicate(timeout=90)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, stderr
    assert stdout == "one\ntwo\n"
    first = stderr.splitlines()[0]
    assert first.startswith(f"job {waiting} is PENDING: ") and "waiting for it to start" in first
    assert wait_state(api, waiting, {"SUCCEEDED"})
