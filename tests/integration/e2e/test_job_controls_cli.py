"""The everyday commands against a real server on the real dockerd: hold, release,
requeue, update, exec, ``jobs --watch``, ``submit --follow``, and ISO times in ``-o json``."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import ServerProcess, gpudock_bin, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker
SLEEP = ["sleep", "300"]
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?\+00:00$")


@pytest.fixture
def server(make_server: Any) -> ServerProcess:
    return make_server().start()  # type: ignore[no-any-return]


def blocked_job(server: ServerProcess) -> tuple[int, int]:
    """A RUNNING job on all 4 GPUs, and a PENDING 1-GPU job waiting behind it."""
    api = server.api()
    blocker = submit(api, image=TEST_IMAGE, command=SLEEP, gpus=4)
    wait_state(api, blocker, {"RUNNING"})
    waiting = submit(api, image=TEST_IMAGE, command=["true"], gpus=1)
    return blocker, waiting


def refused(server: ServerProcess, *args: str, code: int = 1, token: str | None = None) -> str:
    result = server.cli(*args, check=False, token=token)
    assert result.returncode == code, result.stderr + result.stdout
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    return result.stderr.strip().removeprefix("error: ")


def test_a_held_job_is_not_scheduled_until_it_is_released(server: ServerProcess) -> None:
    api = server.api()
    blocker, job = blocked_job(server)

    assert server.cli("hold", str(job)).stdout.strip() == f"job {job} held by admin"
    assert refused(server, "hold", str(job)) == f"job {job} is already held (by admin)"
    server.cli("cancel", str(blocker))
    time.sleep(3)  # three scheduling cycles with every GPU free

    why = json.loads(server.cli("why", str(job), "-o", "json").stdout)
    assert why["state"] == "PENDING"
    assert why["reasons"] == [
        {
            "layer": "hold",
            "message": "held by admin",
            "counterfactual": "runs once released (gpudock release JOB)",
        }
    ]
    assert re.search(r"\n  held +by admin \(gpudock release", server.cli("show", str(job)).stdout)
    assert refused(server, "hold", str(blocker)) == (
        f"job {blocker} is CANCELLED; only a PENDING job is held"
    )
    server.cli("release", str(job))
    assert wait_state(api, job, {"SUCCEEDED"})["held_by"] is None
    assert refused(server, "release", str(job)) == f"job {job} is not held"


def test_requeue_stops_the_container_and_runs_the_job_again_without_a_retry(
    server: ServerProcess, docker: Any
) -> None:
    api = server.api()
    instance = api.get("/healthz").json()["instance"]
    job = submit(api, image=TEST_IMAGE, command=SLEEP, gpus=1, retries=0)
    wait_state(api, job, {"RUNNING"})

    server.cli("requeue", str(job))

    again = wait_for(
        lambda: (j := job_state(api, job))["state"] == "RUNNING" and j["attempt"] == 1 and j,
        60,
        "the second attempt to run",
    )
    assert [e["to"] for e in again["events"]][-4:] == [
        "PENDING",
        "ALLOCATED",
        "STARTING",
        "RUNNING",
    ]
    assert again["events"][-4]["reason"] == "requeued by admin; no retry used"
    first = f"gpudock-{instance}-{job}-a0"
    wait_for(lambda: not docker.api.containers(all=True, filters={"name": first}), 20, "a0 gone")
    pending = submit(api, image=TEST_IMAGE, command=SLEEP, gpus=4)  # 1 of 4 is held: waits
    assert refused(server, "requeue", str(pending)) == (
        f"job {pending} is PENDING; only an ALLOCATED, STARTING or RUNNING job can be requeued"
    )


def test_update_changes_a_pending_job_and_only_lowers_a_running_ones_limit(
    server: ServerProcess,
) -> None:
    api = server.api()
    blocker, job = blocked_job(server)

    server.cli("update", str(job), "--gpus", "2", "--max-runtime", "1h")
    assert (job_state(api, job)["spec"]["gpus"], job_state(api, job)["spec"]["max_runtime"]) == (
        2,
        3600,
    )
    assert re.search(
        r"needs 64 GPUs; node \S+ has only 4",
        refused(server, "update", str(job), "--gpus", "64", code=1),
    )
    assert refused(server, "update", str(blocker), "--gpus", "1") == (
        f"job {blocker} is RUNNING: only its max_runtime may be lowered "
        "(gpus can change only while it is PENDING)"
    )

    server.cli("update", str(blocker), "--max-runtime", "2s")

    ended = wait_state(api, blocker, {"FAILED"}, timeout=30)
    assert ended["reason"].startswith("exceeded max_runtime of 2s")
    assert refused(server, "update", str(blocker), "--max-runtime", "1s") == (
        f"job {blocker} already FAILED; it cannot be updated"
    )


def test_exec_runs_a_command_in_the_running_container_for_its_owner_only(
    server: ServerProcess,
) -> None:
    api = server.api()
    alice = server.cli("token", "create", "--user", "alice").stdout.strip()
    job = int(server.cli("submit", "--gpus", "1", TEST_IMAGE, "--", *SLEEP, token=alice).stdout)
    wait_state(api, job, {"RUNNING"})

    script = "echo out $NVIDIA_VISIBLE_DEVICES; echo err >&2; exit 3"
    done = server.cli("exec", str(job), "--", "sh", "-c", script, token=alice, check=False)

    assert done.returncode == 3, done.stderr
    assert done.stdout == f"out {job_state(api, job)['gpus'][0]}\n" and done.stderr == "err\n"
    bob = server.cli("token", "create", "--user", "bob").stdout.strip()
    other = server.cli("exec", str(job), "--", "true", token=bob, check=False)
    assert other.returncode == 1 and other.stderr.strip() == f"error: job {job} not found"
    admin = refused(server, "exec", str(job), "--", "true")
    assert admin == f"only the job's owner (alice) may run commands in job {job}"
    server.cli("cancel", str(job))
    assert refused(server, "exec", str(job), "--", "true", token=alice) == (
        f"job {job} is CANCELLED; exec needs a RUNNING job"
    )


def test_submit_follow_streams_the_logs_and_exits_with_the_jobs_code(
    server: ServerProcess,
) -> None:
    done = server.cli(
        "submit", "--follow", TEST_IMAGE, "--", "sh", "-c", "echo hello; exit 7", check=False
    )

    job_id, *rest = done.stdout.splitlines()
    assert done.returncode == 7 and rest == ["hello"], done.stderr
    assert job_state(server.api(), int(job_id))["state"] == "FAILED"
    assert server.cli("submit", "--follow", TEST_IMAGE, "--", "true").returncode == 0


def test_jobs_watch_redraws_until_interrupted(server: ServerProcess) -> None:
    submit(server.api(), image=TEST_IMAGE, command=["true"])
    env = {**server.env, "GPUDOCK_URL": server.url, "GPUDOCK_TOKEN": server.admin_token}
    proc = subprocess.Popen(
        [gpudock_bin(), "jobs", "--watch"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal sends it: a suite started in the background by a shell
        # without job control inherits SIGINT ignored, and so would the CLI
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    time.sleep(5)
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=20)

    assert proc.returncode == 0
    frames = stdout.split("--- ")[1:]
    assert len(frames) >= 2 and all("ID" in f and "STATE" in f for f in frames)


def test_every_time_in_json_output_is_iso_8601_with_a_timezone(server: ServerProcess) -> None:
    api = server.api()
    job = submit(api, image=TEST_IMAGE, command=["true"], gpus=1)
    wait_state(api, job, {"SUCCEEDED"})
    server.cli("token", "create", "--user", "carol")
    outputs = {
        "jobs": server.cli("jobs", "-o", "json").stdout,
        "show": server.cli("show", str(job), "-o", "json").stdout,
        "nodes": server.cli("nodes", "-o", "json").stdout,
        "gpus": server.cli("gpus", "-o", "json").stdout,
        "tokens": server.cli("token", "list", "-o", "json").stdout,
        "events": "[" + ",".join(server.cli("events", "-o", "json").stdout.split("\n")[:-1]) + "]",
    }
    seen: dict[str, int] = {}
    for name, text in outputs.items():
        for key, value in _times(json.loads(text)):
            assert isinstance(value, str) and ISO.match(value), (name, key, value)
            seen[name] = seen.get(name, 0) + 1
    assert set(seen) == {"jobs", "show", "nodes", "tokens", "events"}  # gpus: none reserved


def _times(data: Any) -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    if isinstance(data, list):
        for item in data:
            found += _times(item)
    elif isinstance(data, dict):
        for key, value in data.items():
            if (key.endswith("_at") or key in ("at", "last_seen", "eta")) and value is not None:
                found.append((key, value))
            else:
                found += _times(value)
    return found
