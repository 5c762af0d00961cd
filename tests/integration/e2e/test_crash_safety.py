"""kill -9 of a real server at different points, then restart: nothing lost or doubled.

A burst of jobs is pushed through 4 emulated GPUs while the server process is
SIGKILLed again and again: right after submits, while containers are being
started (the stand-in NVIDIA hook is slowed down to hold the window open),
while they run, and while they finish. After every restart the server must
adopt what survived. At the end every acknowledged job has SUCCEEDED, each
container was started exactly once (the hook logs every start), no two
running containers ever shared a GPU, and every GPU is free again.
"""

from __future__ import annotations

import random
import time
from typing import Any

import httpx
import pytest
from tests.integration.e2e.test_lifecycle import running_gpu_sets
from tests.kit.docker import TEST_IMAGE, hook_log_entries
from tests.kit.server import ServerProcess, job_state, wait_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]
DONE = {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}


def try_submit(api: httpx.Client, **spec: Any) -> int | None:
    """Submit; None if the server died before acknowledging."""
    try:
        response = api.post("/v1/jobs", json=spec)
    except httpx.TransportError:
        return None
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def watch_gpus(docker: Any, instance: str, seconds: float, overlaps: list[Any]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sets = running_gpu_sets(docker, instance)
        flat = [g for s in sets for g in s if g]
        if len(flat) != len(set(flat)):
            overlaps.append(sets)
        time.sleep(0.05)


def states(api: httpx.Client) -> dict[int, str]:
    return {j["id"]: j["state"] for j in api.get("/v1/jobs", params={"limit": 1000}).json()}


def test_kill_9_at_many_points_loses_nothing_and_starts_nothing_twice(
    server: ServerProcess, docker: Any
) -> None:
    rng = random.Random(7)
    api = server.api()
    instance = api.get("/healthz").json()["instance"]
    since = time.time()
    acked: list[int] = []
    overlaps: list[Any] = []

    def burst(n: int, hook_delay: float = 0.0) -> None:
        for _ in range(n):
            env = {"FAKE_HOOK_DELAY": str(hook_delay)} if hook_delay else {}
            job = try_submit(
                api,
                image=TEST_IMAGE,
                command=["sleep", f"{rng.uniform(0.3, 1.5):.2f}"],
                gpus=rng.choice([1, 1, 2]),
                env=env,
            )
            if job is not None:
                acked.append(job)

    def crash_and_restart(when: str) -> None:
        server.kill9()
        server.start()
        assert server.proc is not None
        print(f"killed {when}; restarted")

    # 1. right after a burst of submits: allocation and launches in flight
    burst(4)
    crash_and_restart("right after submits")
    # 2. while containers are being started (the hook holds `docker start` open)
    burst(3, hook_delay=1.5)
    wait_for(lambda: "STARTING" in states(api).values(), 20, "a STARTING job")
    crash_and_restart("mid docker start")
    # 3. while containers run
    wait_for(lambda: "RUNNING" in states(api).values(), 20, "a RUNNING job")
    watch_gpus(docker, instance, 0.3, overlaps)
    crash_and_restart("while running")
    # 4. at random moments while jobs finish and new ones start
    for _ in range(3):
        burst(2)
        watch_gpus(docker, instance, rng.uniform(0.2, 1.5), overlaps)
        crash_and_restart("at a random moment")
    # 5. everything drains after the last restart
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(s in DONE for j, s in states(api).items()):
        watch_gpus(docker, instance, 0.5, overlaps)

    final = states(api)
    missing = [j for j in acked if j not in final]
    assert not missing, f"acknowledged jobs lost: {missing}"
    assert {final[j] for j in final} == {"SUCCEEDED"}, {
        j: (job_state(api, j)["state"], job_state(api, j)["reason"])
        for j in final
        if final[j] != "SUCCEEDED"
    }
    starts: dict[int, int] = {}
    for entry in hook_log_entries(since):
        if entry["env"].get("GPUDOCK_INSTANCE") == instance:
            job = int(entry["gpudock_job_id"])
            starts[job] = starts.get(job, 0) + 1
    doubled = {j: n for j, n in starts.items() if n != 1}
    assert not doubled, f"containers started more than once: {doubled}"
    assert set(starts) == set(final), "every job's container started"
    assert not overlaps, f"two running containers shared a GPU: {overlaps[:3]}"
    gpus = api.get("/v1/gpus").json()
    assert all(g["used_memory"] == 0 and g["exclusive_job"] is None for g in gpus)
    assert server.starts >= 7
