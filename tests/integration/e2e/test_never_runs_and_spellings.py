"""A new user's second hour, against one real server on the real dockerd.

* a job that can never run is refused at submit, exit 1, and ``POST /v1/jobs``
  answers 422 with the same words, storing nothing: an unknown queue (queues
  are declared), a queue's limit in GPUs, GPU memory or CPUs, a queue that may
  not borrow, a per-user cap;
* Docker's and Slurm's spellings: ``-v``, ``--mount type=bind,…``, several ids
  and array tasks for cancel, hold, release and requeue;
* a node with fewer CPUs than GPUs says so, at start and in ``gpudock nodes``;
* a job file's mistakes point at their line; ``admin apply`` counts in English.

One server for the module: 4 emulated H100s, 3 CPUs (so the CPU warning),
and four queues.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tests.integration.e2e.conftest import teardown
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, job_state, submit, wait_for, wait_state

pytestmark = pytest.mark.docker
SLEEP = ["sleep", "300"]
CPU_WARNING = (
    "4 GPUs but 3 CPUs: at most 3 one-GPU jobs at once (job_defaults.cpus is 1); "
    "set job_defaults.cpus or node.cpus"
)
QUEUES = {
    "queues": [
        {"name": "vision", "limit": {"gpus": 2, "gpu_memory": "100GiB", "cpus": 2}},
        {"name": "nlp", "guarantee": {"gpus": 1}, "borrow": False},
        {"name": "capped", "max_running_gpus_per_user": 1},
    ]
}


@pytest.fixture(scope="module")
def box(
    tmp_path_factory: pytest.TempPathFactory, docker: Any
) -> Iterator[tuple[ServerProcess, Path]]:
    """The server, and a host folder with ``data/`` (allowlisted read-only) and
    ``scratch/`` (read-write)."""
    host = tmp_path_factory.mktemp("second-hour").resolve()
    (host / "data").mkdir()
    (host / "scratch").mkdir()
    config: dict[str, Any] = {
        **FAST_CONFIG,
        "node": {"cpus": 3, "memory": "64GiB"},
        "executor": {
            **FAST_CONFIG["executor"],
            "allowed_mounts": [f"{host / 'data'}:ro", f"{host / 'scratch'}:rw"],
        },
        "scheduler": {"queues": QUEUES},
    }
    server = ServerProcess(host / "home", config=config).start(wait=False)
    server.wait_healthy(timeout=120)
    try:
        yield server, host
    finally:
        teardown(server, docker)


@pytest.fixture
def server(box: tuple[ServerProcess, Path]) -> ServerProcess:
    return box[0]


def refused(server: ServerProcess, *args: str, code: int = 1) -> str:
    """Run a CLI command that must fail with one ``error:`` line; the line's message."""
    result = server.cli(*args, check=False)
    assert result.returncode == code, result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0].removeprefix("error: ")


def waiting_job(api: httpx.Client, **spec: Any) -> tuple[int, int]:
    """A running sleeper and a job that waits for it to succeed (``after_ok``): PENDING
    for as long as the test wants, without holding anything."""
    blocker = submit(api, image=TEST_IMAGE, command=SLEEP, cpus=0.1, memory="64MiB")
    job = submit(api, image=TEST_IMAGE, command=["true"], after_ok=[blocker], **spec)
    return blocker, job


NEVER = [
    (
        ["--queue", "nosuchq"],
        {"queue": "nosuchq"},
        "queue 'nosuchq' does not exist (declared queues: capped, default, nlp, vision)",
        "queue",
    ),
    (
        ["--queue", "vision", "--gpus", "3"],
        {"queue": "vision", "gpus": 3},
        "needs 3 GPUs but queue vision's limit is 2 GPUs",
        "gpus",
    ),
    (
        ["--queue", "vision", "--gpus", "2", "--gpu-memory", "60GiB"],
        {"queue": "vision", "gpus": 2, "gpu_memory": "60GiB"},
        "needs 120GiB GPU memory but queue vision's limit is 100GiB GPU memory",
        "gpu_memory",
    ),
    (
        ["--queue", "vision", "--cpus", "3"],
        {"queue": "vision", "cpus": 3},
        "needs 3 CPUs but queue vision's limit is 2 CPUs",
        "cpus",
    ),
    (
        ["--queue", "nlp", "--gpus", "2"],
        {"queue": "nlp", "gpus": 2},
        "needs 2 GPUs but queue nlp may not borrow and its guarantee is 1 GPU",
        "gpus",
    ),
    (
        ["--queue", "capped", "--gpus", "2"],
        {"queue": "capped", "gpus": 2},
        "needs 2 GPUs but queue capped's max_running_gpus_per_user is 1",
        "gpus",
    ),
]


@pytest.mark.parametrize(("flags", "spec", "why", "field"), NEVER)
def test_a_job_that_can_never_run_is_refused_at_submit_and_nothing_is_stored(
    server: ServerProcess, flags: list[str], spec: dict[str, Any], why: str, field: str
) -> None:
    api = server.api()
    before = api.get("/v1/jobs").json()

    assert refused(server, "submit", *flags, TEST_IMAGE) == f"job can never be scheduled: {why}"
    response = api.post("/v1/jobs", json={"image": TEST_IMAGE, **spec})

    assert response.status_code == 422
    assert response.json()["error"] == {
        "code": "Infeasible",
        "message": f"job can never be scheduled: {why}",
        "field": field,
    }
    assert api.get("/v1/jobs").json() == before


def test_a_job_within_its_queues_bounds_runs_and_an_update_past_them_is_refused(
    server: ServerProcess,
) -> None:
    api = server.api()
    ran = int(server.cli("submit", "--queue", "vision", "--gpus", "1", TEST_IMAGE, "true").stdout)
    assert wait_state(api, ran, {"SUCCEEDED"})["state"] == "SUCCEEDED"
    blocker, job = waiting_job(api, queue="vision", gpus=1)

    assert refused(server, "update", str(job), "--gpus", "3") == (
        "job can never be scheduled: needs 3 GPUs but queue vision's limit is 2 GPUs"
    )
    assert job_state(api, job)["spec"]["gpus"] == 1
    server.cli("cancel", str(job), str(blocker), "--wait", "0")


def test_cancel_hold_release_and_requeue_take_several_ids_and_array_tasks(
    server: ServerProcess,
) -> None:
    api = server.api()
    blocker = submit(api, image=TEST_IMAGE, command=SLEEP, cpus=0.1, memory="64MiB")
    array = int(
        server.cli(
            "submit", "--array", "0-3", "--after-ok", str(blocker), "--cpus", "0.1",
            TEST_IMAGE, "--", "true",
        ).stdout
    )  # fmt: skip
    tasks = [array + i for i in range(4)]

    held = server.cli("hold", f"{array}[0-1]", f"{array}_2")
    assert held.stdout.splitlines() == [f"job {t} held by admin" for t in tasks[:3]]
    assert [job_state(api, t)["held_by"] for t in tasks] == ["admin"] * 3 + [None]

    mixed = server.cli("release", f"{array}_[0-2]", "999999", check=False)
    assert mixed.returncode == 1
    assert mixed.stdout.splitlines() == [f"job {t} released (PENDING)" for t in tasks[:3]]
    assert mixed.stderr.strip() == "error: job 999999 not found"
    assert refused(server, "hold", f"{array}[7]") == (
        f"array {array} has no task with index 7 (its indices are 0-3)"
    )
    assert refused(server, "hold", "12x", code=2).startswith("job id '12x' must be a number")
    listed = json.loads(server.cli("hold", f"{array}[3]", "-o", "json").stdout)
    assert [j["id"] for j in listed] == [tasks[3]]

    wait_state(api, blocker, {"RUNNING"})
    pending = server.cli("requeue", str(tasks[0]), str(blocker), check=False)
    assert pending.returncode == 1  # the pending task cannot be requeued; the sleeper is
    assert pending.stdout.strip() == (
        f"job {blocker} is being requeued (its container stops, then PENDING)"
    )
    assert f"job {tasks[0]} is PENDING" in pending.stderr
    wait_for(lambda: (j := job_state(api, blocker))["attempt"] == 1 and j["state"] == "RUNNING")

    cancelled = server.cli("cancel", f"{array}[*]", str(blocker), "--wait", "20")
    assert cancelled.stdout.splitlines() == [
        f"job {t} CANCELLED: cancelled by admin" for t in [*tasks, blocker]
    ]
    assert refused(server, "cancel", str(blocker)) == f"job {blocker} already CANCELLED"


def test_docker_mount_spellings_are_stored_in_gpudocks_form_and_work(
    box: tuple[ServerProcess, Path],
) -> None:
    server, host = box
    api = server.api()
    data, scratch = host / "data", host / "scratch"
    blocker, _ = waiting_job(api, cpus=0.1)
    spellings = {
        ("-v", f"{data}:/data"): f"{data}:/data",
        ("--mount", f"type=bind,src={data},dst=/d,readonly"): f"{data}:/d:ro",
        ("--mount", f"type=bind,source={scratch},target=/out"): f"{scratch}:/out:rw",
        ("--mount", f"src={data},destination=/d,readonly=true"): f"{data}:/d:ro",
    }
    for flags, stored in spellings.items():
        job = int(server.cli("submit", *flags, "--after-ok", str(blocker), TEST_IMAGE).stdout)
        assert job_state(api, job)["spec"]["mounts"] == [stored], flags

    assert "is read-only (ro); mount it read-only" in refused(
        server, "submit", "--mount", f"type=bind,src={data},dst=/d", TEST_IMAGE, code=2
    )
    assert "type must be 'bind'" in refused(
        server, "submit", "--mount", "type=volume,src=v,dst=/d", TEST_IMAGE, code=2
    )
    ran = server.cli(
        "submit", "--cpus", "0.1", "--mount", f"type=bind,src={scratch},dst=/out",
        TEST_IMAGE, "--", "sh", "-c", "echo written > /out/proof",
    ).stdout  # fmt: skip
    assert wait_state(api, int(ran), {"SUCCEEDED", "FAILED"})["state"] == "SUCCEEDED"
    assert (scratch / "proof").read_text() == "written\n"
    server.cli("cancel", str(blocker), "--wait", "0")


def test_a_node_with_fewer_cpus_than_gpus_says_so_at_start_and_in_nodes(
    server: ServerProcess,
) -> None:
    assert f"WARNING [controller] gpudock.server: node {_node(server)}: {CPU_WARNING}" in (
        server.log_all()
    )
    (node,) = server.api().get("/v1/nodes").json()
    assert node["warnings"] == [CPU_WARNING]
    table = " ".join(server.cli("nodes").stdout.split())
    assert " ".join(CPU_WARNING.split()) in table


def _node(server: ServerProcess) -> str:
    return str(server.api().get("/v1/nodes").json()[0]["name"])


def test_a_job_files_mistakes_point_at_their_line(server: ServerProcess, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"image: {TEST_IMAGE}\ngpu_mem: 20GiB\n")
    assert refused(server, "submit", "-f", str(spec), code=2) == (
        f"{spec}:2:1: invalid job spec: gpu_mem: unknown field"
    )
    spec.write_text(f"image: {TEST_IMAGE}\nqueue: nosuchq\n")
    assert refused(server, "submit", "-f", str(spec)).startswith(
        f"{spec}:2:1: job can never be scheduled: queue 'nosuchq' does not exist"
    )
    # a flag's value is not the file's: no position
    assert refused(server, "submit", "-f", str(spec), "--queue", "nope").startswith(
        "job can never be scheduled: queue 'nope' does not exist"
    )


def test_admin_apply_counts_its_changes_in_english(server: ServerProcess, tmp_path: Path) -> None:
    config = yaml.safe_load(server.cli("admin", "get").stdout)
    config["priority_classes"] = [*config.get("priority_classes", []), {"name": "rush", "value": 5}]
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(config))

    applied = server.cli("admin", "apply", "-f", str(cluster)).stdout.splitlines()

    assert applied[-1].endswith("(1 change)"), applied
