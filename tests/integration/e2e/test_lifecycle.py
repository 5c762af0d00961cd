"""A job's life on a real server and a real dockerd, on SQLite and PostgreSQL.

Jobs queue, get specific emulated GPUs, run as containers whose NVIDIA device
request names exactly those GPUs, finish, and free them.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from docker.errors import NotFound
from tests.kit.docker import TEST_IMAGE, hook_log_entries
from tests.kit.server import ServerProcess, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker
DONE = {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}


def running_gpu_sets(docker: Any, instance: str) -> list[tuple[str, ...]]:
    """The NVIDIA_VISIBLE_DEVICES of every running container of this instance."""
    sets = []
    for summary in docker.api.containers(filters={"label": f"gpudock.instance={instance}"}):
        try:
            env = dict(
                e.split("=", 1)
                for e in docker.api.inspect_container(summary["Id"])["Config"]["Env"]
            )
        except NotFound:
            continue  # finished and removed meanwhile
        sets.append(tuple(env.get("NVIDIA_VISIBLE_DEVICES", "").split(",")))
    return sets


def test_jobs_queue_run_on_their_own_gpus_and_finish(server: ServerProcess, docker: Any) -> None:
    api = server.api()
    instance = api.get("/healthz").json()["instance"]
    since = time.time()
    ids = [submit(api, image=TEST_IMAGE, command=["sleep", "1.5"], gpus=1) for _ in range(6)]
    ids.append(submit(api, image=TEST_IMAGE, command=["sleep", "1"], gpus=2, name="pair"))
    # 4 GPUs, 8 wanted at once: some must queue with a reason naming the shortage.
    pending = wait_for(
        lambda: [
            j
            for j in api.get("/v1/jobs", params={"state": "PENDING"}).json()
            if j["pending_reasons"]
        ],
        timeout=20,
        what="a pending job with a reason",
    )
    assert "free" in pending[0]["pending_reasons"][0]["message"]
    seen_overlap = []
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        sets = running_gpu_sets(docker, instance)
        flat = [g for s in sets for g in s]
        if len(flat) != len(set(flat)):
            seen_overlap.append(sets)
        if all(job_state(api, i)["state"] in DONE for i in ids):
            break
        time.sleep(0.2)
    assert not seen_overlap, f"two exclusive jobs shared a GPU: {seen_overlap}"
    jobs = {i: job_state(api, i) for i in ids}
    assert {j["state"] for j in jobs.values()} == {"SUCCEEDED"}, jobs
    starts = [e for e in hook_log_entries(since) if e["env"].get("GPUDOCK_INSTANCE") == instance]
    by_job = {int(e["gpudock_job_id"]): e for e in starts}
    assert len(starts) == len(ids), "each job's container started exactly once"
    for job_id, job in jobs.items():
        allocated = job["allocation"]["gpus"] if job["allocation"] else None
        got = by_job[job_id]["nvidia_visible_devices"].split(",")
        assert allocated is None  # released after the end
        assert len(got) == job["spec"]["gpus"]
        assert got == job["gpus"], f"job {job_id}: container saw {got}, store says {job['gpus']}"
    gpus = api.get("/v1/gpus").json()
    assert all(g["used_memory"] == 0 and g["exclusive_job"] is None for g in gpus)


def test_shared_jobs_share_a_gpu_but_never_with_an_exclusive_job(
    server: ServerProcess, docker: Any
) -> None:
    api = server.api()
    shared = [
        submit(api, image=TEST_IMAGE, command=["sleep", "30"], gpus=1, gpu_memory="30GiB")
        for _ in range(2)
    ]
    for job_id in shared:
        wait_state(api, job_id, {"RUNNING"})
    a, b = (job_state(api, j) for j in shared)
    assert a["gpus"] == b["gpus"], "best-fit puts both shares on one GPU"
    assert a["allocation"]["memory_per_gpu"] == 30 * 1024**3
    exclusive = [submit(api, image=TEST_IMAGE, command=["sleep", "30"], gpus=1) for _ in range(3)]
    for job_id in exclusive:
        wait_state(api, job_id, {"RUNNING"})
    held = {job_state(api, j)["gpus"][0] for j in exclusive}
    assert a["gpus"][0] not in held and len(held) == 3
    blocked = submit(api, image=TEST_IMAGE, command=["true"], gpus=1)
    reason = wait_for(lambda: job_state(api, blocked)["pending_reasons"], 20, "pending reason")
    assert reason[0]["layer"] == "devices"
    assert "needs 1 GPU" in reason[0]["message"], reason


def test_pending_reason_names_the_shortage_and_the_job_runs_when_gpus_free(
    server: ServerProcess,
) -> None:
    api = server.api()
    hog = submit(api, image=TEST_IMAGE, command=["sleep", "3"], gpus=3)
    wait_state(api, hog, {"RUNNING"})
    waiting = submit(api, image=TEST_IMAGE, command=["true"], gpus=2)
    reasons = wait_for(lambda: job_state(api, waiting)["pending_reasons"], 20, "pending reason")
    node = api.get("/v1/nodes").json()[0]["name"]
    assert reasons[0]["message"] == f"needs 2 GPUs; node {node} has 1 free"
    done = wait_state(api, waiting, DONE, timeout=60)
    assert done["state"] == "SUCCEEDED" and done["pending_reasons"] == []


def test_cancel_stops_a_running_container_and_frees_its_gpus(
    server: ServerProcess, docker: Any
) -> None:
    api = server.api()
    job_id = submit(api, image=TEST_IMAGE, command=["sleep", "300"], gpus=2)
    running = wait_state(api, job_id, {"RUNNING"})
    response = api.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200
    done = wait_state(api, job_id, DONE, timeout=30)
    assert done["state"] == "CANCELLED" and done["reason"] == "cancelled by admin"
    wait_for(
        lambda: not docker.api.containers(all=True, filters={"name": running["container"]}),
        15,
        "the cancelled container to be removed",
    )
    assert api.post(f"/v1/jobs/{job_id}/cancel").status_code == 409
    gpus = {g["uuid"]: g for g in api.get("/v1/gpus").json()}
    assert all(gpus[u]["exclusive_job"] is None for u in running["gpus"])


def test_max_runtime_stops_the_job(server: ServerProcess) -> None:
    api = server.api()
    job_id = submit(api, image=TEST_IMAGE, command=["sleep", "300"], gpus=1, max_runtime="2s")
    done = wait_state(api, job_id, DONE, timeout=30)
    assert done["state"] == "FAILED"
    assert done["reason"] == "exceeded max_runtime of 2s; stopped"
    assert done["finished_at"] - done["started_at"] < 15


def test_missing_image_fails_the_job_and_frees_its_gpus(server: ServerProcess) -> None:
    api = server.api()
    job_id = submit(api, image="127.0.0.1:9/gpudock/nope:1", gpus=4)
    done = wait_state(api, job_id, DONE, timeout=60)
    assert done["state"] == "FAILED"
    assert "not present and could not be pulled" in done["reason"]
    after = submit(api, image=TEST_IMAGE, command=["true"], gpus=4)
    assert wait_state(api, after, DONE)["state"] == "SUCCEEDED"


def test_exit_codes_oom_and_retries_are_recorded(server: ServerProcess) -> None:
    api = server.api()
    failing = submit(api, image=TEST_IMAGE, command=["sh", "-c", "echo try; exit 3"], retries=1)
    done = wait_state(api, failing, DONE)
    assert (done["state"], done["exit_code"], done["attempt"]) == ("FAILED", 3, 1)
    assert done["reason"] == "exited with code 3"
    history = [e["to"] for e in done["events"]]
    assert history.count("RUNNING") == 2 and "PENDING" in history[1:]
    logs = api.get(f"/v1/jobs/{failing}/logs").text
    assert logs.count("try") == 2 and "--- attempt 1 ---" in logs


def test_logs_outlive_the_container(server: ServerProcess, docker: Any) -> None:
    api = server.api()
    job_id = submit(api, image=TEST_IMAGE, command=["sh", "-c", "echo hello from $GPUDOCK_JOB_ID"])
    wait_state(api, job_id, DONE)
    instance = api.get("/healthz").json()["instance"]
    labels = [f"gpudock.job={job_id}", f"gpudock.instance={instance}"]
    # the container is removed right after the final state commits
    wait_for(
        lambda: not docker.api.containers(all=True, filters={"label": labels}),
        15,
        "the finished container to be removed",
    )
    assert api.get(f"/v1/jobs/{job_id}/logs").text == f"hello from {job_id}\n"


def test_follow_streams_a_running_job_until_it_ends(server: ServerProcess) -> None:
    api = server.api()
    job_id = submit(
        api,
        image=TEST_IMAGE,
        command=["sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 0.5; done"],
    )
    wait_state(api, job_id, {"RUNNING", *DONE})
    with api.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": True}) as response:
        body = b"".join(response.iter_bytes()).decode()
    assert body.strip().splitlines()[-1] == "tick 3"
