"""A node that survives hung engine calls (issue 41), on a private dockerd.

An engine can hang on one container and answer every other call. Two real
ways, on a private dockerd (``tests/kit/own_dockerd.py``; never the shared one):

* a start held in runc's prestart hook (the stand-in NVIDIA hook waits the
  container's ``FAKE_HOOK_DELAY``), as dockerd's own ``libnetwork-setkey``
  hook hung in a dispatch run: dockerd holds the container's lock, so
  ``docker inspect`` of it hangs while ``docker ps`` lists it ``created``;
* a running container whose containerd shim is frozen (SIGSTOP) while a
  ``docker kill`` of it waits on the shim with the container's lock held.
  (A frozen shim alone does not make inspect hang on Docker 20.10: inspect of
  a running container never asks the shim.)

Each time the job keeps its state and GPUs with an ``engine`` reason and is
never started a second time, the node stays available, and other jobs start
and finish meanwhile; once the engine answers again the job is settled. The
server's engine deadlines are short here (2 s to describe, 3 s per call).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.own_dockerd import OwnDockerd, children
from tests.kit.server import FAST_CONFIG, ServerProcess, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker

DESCRIBED_NOT = "engine did not describe container"


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OwnDockerd]:
    hook_log = tmp_path_factory.mktemp("hook") / "hook.jsonl"
    with OwnDockerd("gpudock-hang", hook_log=hook_log) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def server(engine: OwnDockerd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    executor = {
        "docker_url": engine.url,
        "stop_grace": "1s",
        "inspect_timeout": "2s",
        "call_timeout": "3s",
    }
    process = ServerProcess(
        tmp_path_factory.mktemp("home"), config={**FAST_CONFIG, "executor": executor}
    )
    process.start(wait=False)
    process.wait_healthy(timeout=120)
    yield process
    process.stop()


def held_by_engine(api: Any, job_id: int) -> dict[str, Any] | None:
    """The job, once its one reason says the engine does not describe its container."""
    job = job_state(api, job_id)
    reasons = job["pending_reasons"]
    if len(reasons) == 1 and reasons[0]["layer"] == "engine":
        return job
    return None


def neighbours_run_and_finish(api: Any, count: int) -> None:
    spec = {"image": TEST_IMAGE, "command": ["true"], "gpus": 1, "retries": 0}
    jobs = [submit(api, **spec) for _ in range(count)]
    for job_id in jobs:
        assert wait_state(api, job_id, {"SUCCEEDED", "FAILED", "LOST"}, 60)["state"] == "SUCCEEDED"


def node_available(api: Any) -> bool:
    nodes = api.get("/v1/nodes").json()
    return bool(nodes) and all(n["status"] == "available" for n in nodes)


def runs(api: Any, job_id: int) -> int:
    events = api.get(f"/v1/jobs/{job_id}").json()["events"]
    return sum(e["to"] == "RUNNING" for e in events)


def test_a_start_held_in_the_engine_holds_its_job_and_the_node_goes_on(
    engine: OwnDockerd, server: ServerProcess
) -> None:
    api = server.api()
    slow = submit(
        api, image=TEST_IMAGE, command=["true"], gpus=1, retries=0, env={"FAKE_HOOK_DELAY": "25"}
    )
    held = wait_for(lambda: held_by_engine(api, slow), 20, "the held start's engine reason")
    assert held["state"] == "STARTING"
    assert held["pending_reasons"][0]["message"].startswith(
        f"{DESCRIBED_NOT} {held['container']} for "
    )

    neighbours_run_and_finish(api, 3)
    assert node_available(api)
    assert job_state(api, slow)["state"] == "STARTING", "held, not failed, requeued or lost"

    done = wait_state(api, slow, {"SUCCEEDED", "FAILED", "LOST", "PENDING"}, 60)
    assert done["state"] == "SUCCEEDED", done
    assert done["pending_reasons"] == [], "settled once the engine answered"
    assert runs(api, slow) <= 1
    assert engine.hook_log is not None
    starts = [
        record
        for line in engine.hook_log.read_text().splitlines()
        if (record := json.loads(line))["gpudock_job_id"] == str(slow)
    ]
    assert len(starts) == 1, f"the job's container was started more than once: {starts}"
    assert f"job {slow}: the engine describes container" in server.log_all()


def test_a_running_container_the_engine_cannot_describe_holds_its_job_until_it_can(
    engine: OwnDockerd, server: ServerProcess
) -> None:
    api = server.api()
    job = submit(api, image=TEST_IMAGE, command=["sleep", "3"], gpus=1, retries=0)
    name = wait_state(api, job, {"RUNNING"}, 60)["container"]
    client = engine.client()
    shim = engine.shims()[client.api.inspect_container(name)["Id"]]
    os.kill(shim, signal.SIGSTOP)
    try:
        slow_client = docker.DockerClient(base_url=engine.url, timeout=120)
        threading.Thread(  # waits on the frozen shim, holding the container's lock
            target=_quietly, args=(lambda: slow_client.api.kill(name, "SIGWINCH"),), daemon=True
        ).start()
        held = wait_for(lambda: held_by_engine(api, job), 20, "the job's engine reason")
        assert held["state"] == "RUNNING"

        neighbours_run_and_finish(api, 2)
        assert node_available(api)
        wait_for(lambda: _ended_unreaped(shim), 30, "the job's command to end (unreaped)")
        still = job_state(api, job)
        assert still["state"] == "RUNNING", "not finished or lost while undescribed"
        assert still["pending_reasons"][0]["message"].startswith(f"{DESCRIBED_NOT} {name} for ")
        why = server.cli("why", str(job)).stdout
        assert f"job {job} is RUNNING" in why and "it is held because:" in why
        assert f"[engine] {DESCRIBED_NOT} {name} for " in why
    finally:
        os.kill(shim, signal.SIGCONT)

    done = wait_state(api, job, {"SUCCEEDED", "FAILED", "LOST", "PENDING"}, 60)
    assert done["state"] == "SUCCEEDED", done
    assert done["pending_reasons"] == []
    assert runs(api, job) == 1

    wait_for(
        lambda: not client.api.containers(all=True, filters={"label": "gpudock.job"}),
        30,
        "the engine to hold no gpudock container",
    )


def _quietly(call: Any) -> None:
    with contextlib.suppress(docker.errors.DockerException, OSError):
        call()


def _ended_unreaped(shim: int) -> bool:
    """The container's init, the frozen shim's child, has exited: a zombie it cannot reap."""
    inits = children(shim)
    return bool(inits) and all(
        "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text() for pid, _ in inits
    )
