"""dockerd killed (``kill -9``) at random points of 20 launches, then restarted.

Issue 28: a dockerd killed mid-``docker start`` came back answering ``task …:
already exists``, and gpudock failed the job for good. Here a private dockerd
(``tests/kit/own_dockerd.py``, never the shared one) runs with
``--live-restore``, as docs/operations.md recommends, and is killed at
seeded random moments while a real ``gpudock server`` launches jobs that
always succeed. Afterwards:

- no job FAILED or was LOST (each has ``retries: 0``, so any engine fault
  that spent a retry would show as FAILED), except the open case of a running
  container whose exit status the restarted engine lost (code 255; reported);
- no job reached RUNNING twice (its event log), and no job's command ran
  twice (each appends a line to its own file on a bind mount) unless the kill
  cut that job's own ``docker start`` call: then Docker's API cannot say
  whether the start happened (a restarted engine shows a container whose
  command ran and exited during the outage as ``created`` again), and
  gpudock starts it: the at-least-once window of docs/operations.md;
- no gpudock container is left on the engine, and no containerd shim without
  a container runs a job's process. Shims that the engine forgot (Docker
  leaves one per container that was starting or running when it died; the
  engine's API cannot reach them, docs/operations.md) are reaped by gpudock:
  none of this instance's is left.

The seed is ``GPUDOCK_CRASH_SEED`` (default 28); the kill schedule is printed.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.own_dockerd import OwnDockerd, children
from tests.kit.server import FAST_CONFIG, ServerProcess, job_state, submit, wait_for

pytestmark = pytest.mark.docker

JOBS, WAVES = 20, 5
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}
LOST_EXIT_STATUS = "exited with code 255"
"""A job here can only exit 0; 255 is what a restarted dockerd records for a container
whose exit status it lost. Known and open (docs/operations.md): reported, not failed."""


@pytest.fixture
def engine() -> Iterator[OwnDockerd]:
    with OwnDockerd("gpudock-crash", live_restore=True) as daemon:
        yield daemon


@pytest.fixture
def server(engine: OwnDockerd, tmp_path: Path) -> Iterator[ServerProcess]:
    marks = tmp_path / "marks"
    marks.mkdir()
    executor = {"stop_grace": "2s", "docker_url": engine.url, "allowed_mounts": [f"{marks}:rw"]}
    process = ServerProcess(tmp_path / "home", config={**FAST_CONFIG, "executor": executor})
    process.marks = marks  # type: ignore[attr-defined]
    process.start(wait=False)
    process.wait_healthy(timeout=120)  # two cores shared: a cold start can be slow
    yield process
    process.stop()


def launch_wave(api: Any, marks: Path, first: int, count: int) -> list[int]:
    """``count`` CPU-only jobs that each leave one line in ``marks/<n>`` per run."""
    return [
        submit(
            api,
            image=TEST_IMAGE,
            command=["sh", "-c", "echo ran >> /marks/$MARK && sleep 1"],
            env={"MARK": str(n)},
            mounts=[f"{marks}:/marks:rw"],
            retries=0,
        )
        for n in range(first, first + count)
    ]


def test_dockerd_killed_during_launches_fails_no_job_and_starts_none_twice_by_itself(
    engine: OwnDockerd, server: ServerProcess
) -> None:
    seed = int(os.environ.get("GPUDOCK_CRASH_SEED", "28"))
    rng = random.Random(seed)
    api, marks = server.api(), server.marks  # type: ignore[attr-defined]
    schedule: list[str] = []
    jobs: list[int] = []
    per_wave = JOBS // WAVES
    for wave in range(WAVES):
        jobs += launch_wave(api, marks, wave * per_wave, per_wave)
        after, down = rng.uniform(0.0, 1.2), rng.uniform(0.1, 1.0)
        time.sleep(after)
        states = sorted(job_state(api, j)["state"] for j in jobs[-per_wave:])
        engine.kill9()
        time.sleep(down)
        engine.start()
        schedule.append(
            f"wave {wave}: kill -9 {after:.2f}s after submit ({states}), down {down:.2f}s"
        )
    print(f"seed {seed}:\n  " + "\n  ".join(schedule))

    done = wait_for(
        lambda: all((s := [job_state(api, j) for j in jobs])[i]["state"] in TERMINAL
                    for i in range(len(jobs))) and s,
        150,
        f"all {JOBS} jobs to end (seed {seed}: {schedule})",
    )  # fmt: skip

    failed = {j["id"]: (j["state"], j["reason"]) for j in done if j["state"] != "SUCCEEDED"}
    lost_status = {i for i, (state, why) in failed.items() if why == LOST_EXIT_STATUS}
    assert not failed.keys() - lost_status, f"jobs that did not succeed (seed {seed}): {failed}"
    print(f"exit status lost by the engine (open, docs/operations.md): {lost_status}")
    runs = {job_id: len((marks / str(n)).read_text().splitlines()) for n, job_id in enumerate(jobs)}
    assert all(count >= 1 for count in runs.values()), f"runs per job (seed {seed}): {runs}"
    twice = {job_id for job_id, count in runs.items() if count > 1}
    resumed = [line for line in server.log_all().splitlines() if "the launch resumes" in line]
    cut = {  # the launcher's line for a launch the engine's death cut (runtime/launcher.py)
        job_id for job_id in jobs if any(f"job {job_id}: " in line for line in resumed)
    }
    assert twice <= cut, f"jobs run twice though no launch of theirs was cut: {twice - cut}"
    print(f"ran twice, their start call cut by the kill (docs: at-least-once window): {twice}")
    for job in done:
        events = api.get(f"/v1/jobs/{job['id']}").json()["events"]
        # 0 when the container ran and exited before gpudock saw it run (STARTING → SUCCEEDED)
        assert sum(e["to"] == "RUNNING" for e in events) <= 1, events
    requeues = [
        e["reason"]
        for j in done
        for e in api.get(f"/v1/jobs/{j['id']}").json()["events"]
        if "no retry used" in (e["reason"] or "")
    ]
    print(f"requeued after engine faults ({len(requeues)}): {requeues}")

    client = engine.client()
    wait_for(
        lambda: not client.api.containers(all=True, filters={"label": "gpudock.job"}),
        30,
        "the engine to hold no gpudock container",
    )

    def forgotten() -> dict[str, int]:
        known = {c["Id"] for c in client.api.containers(all=True)}
        return {cid: pid for cid, pid in engine.shims().items() if cid not in known}

    orphans = forgotten()
    running_jobs = {
        cid: [c for c in children(pid) if c[1] != ["runc", "init"]] for cid, pid in orphans.items()
    }
    assert not any(running_jobs.values()), f"shims without a container run: {running_jobs}"
    wait_for(lambda: not forgotten(), 30, "gpudock to reap the shims Docker forgot")
    reaped = server.log_all().count("reaped the containerd shim of container")
    print(f"shims Docker forgot, reaped by gpudock: {reaped}")
