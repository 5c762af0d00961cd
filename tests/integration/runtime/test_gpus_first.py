"""GPUs first: a finished job frees its GPUs before its logs are copied, and log
copies are capped (real dockerd, in-process runtime)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE, cleanup_containers
from tests.kit.server import wait_for

from gpudock.config import LogsConfig, ServerConfig
from gpudock.core.job import JobSpec, JobState
from gpudock.runtime.reconciler import reconcile, reconcile_container
from gpudock.server import Server, build_server
from gpudock.services.jobs import JobService
from gpudock.store import jobs as job_store
from gpudock.store.tokens import Principal

pytestmark = pytest.mark.docker

ADMIN = Principal(user="admin", is_admin=True)


@pytest.fixture
def server(tmp_path: Path, docker_api: Any) -> Iterator[Server]:
    """One emulated GPU, archives capped at 4 KiB; nothing runs in the background."""
    config = ServerConfig(logs=LogsConfig(max_bytes=4096))
    server = build_server(tmp_path, config, emulate_gpus="1xH100-80GB")
    yield server
    server.ctx.shutdown()
    cleanup_containers(docker_api, f"gpudock.instance={server.ctx.instance_id}")


def state(server: Server, job_id: int) -> JobState:
    with server.ctx.db.read() as session:
        job = job_store.get_job(session, job_id)
    assert job is not None
    return job.state


def run_to_exit(server: Server, command: str) -> int:
    """Submit a 1-GPU job, schedule and launch it, and wait for its container to exit."""
    job = JobService(server.ctx).submit(
        JobSpec(image=TEST_IMAGE, command=["sh", "-c", command], gpus=1), ADMIN
    )
    assert server.controller.schedule_once().committed, "the job was not placed"
    wait_for(lambda: state(server, job.id) is JobState.RUNNING, 60, "the job to run")
    name = JobService(server.ctx).get(job.id, ADMIN).container_name
    assert name is not None
    wait_for(lambda: (s := server.ctx.executor.inspect(name)) and s.finished, 60, "the exit")
    return job.id


def exited_without_full_passes(server: Server, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """A 1-GPU job whose container exited, and its container's name; from here on a full
    pass (which lists the containers) fails the test."""
    job_id = run_to_exit(server, "true")
    name = JobService(server.ctx).get(job_id, ADMIN).container_name
    assert name is not None

    def no_listing() -> list[Any]:
        raise AssertionError("a full pass listed the containers")

    monkeypatch.setattr(server.ctx.executor, "list_containers", no_listing)
    return job_id, name


def test_a_finished_job_frees_its_gpu_before_its_logs_are_copied(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = run_to_exit(server, "echo hello; echo END")
    copying, release = threading.Event(), threading.Event()
    real_logs = server.ctx.executor.logs

    def slow_logs(name: str, follow: bool = False) -> Iterator[bytes]:
        copying.set()
        release.wait(60)
        yield from real_logs(name, follow)

    monkeypatch.setattr(server.ctx.executor, "logs", slow_logs)
    reconcile(server.ctx)  # finds the exited container: finish, then archive
    wait_for(copying.is_set, 60, "the log copy to start")

    assert state(server, first) is JobState.SUCCEEDED, "committed while the copy is blocked"
    second = JobService(server.ctx).submit(
        JobSpec(image=TEST_IMAGE, command=["true"], gpus=1), ADMIN
    )
    placed = server.controller.schedule_once().committed
    assert [p.job_id for p in placed] == [second.id], "the GPU was free for the next job"

    release.set()
    archive = server.ctx.log_dir / f"job-{first}" / "attempt-0.log"
    wait_for(archive.exists, 60, "the archive")
    assert archive.read_bytes() == b"hello\nEND\n"


def test_a_long_log_keeps_its_tail_and_says_what_was_cut(server: Server) -> None:
    job_id = run_to_exit(server, "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done")
    reconcile(server.ctx)
    archive = server.ctx.log_dir / f"job-{job_id}" / "attempt-0.log"
    wait_for(archive.exists, 60, "the archive")
    text = archive.read_text()
    total = sum(len(f"line-{i}\n") for i in range(2000))
    first, rest = text.split("\n", 1)
    assert first == (
        f"[gpudock] log cut: the first {total - 4096} of {total} bytes are not kept "
        "(logs.max_bytes is 4KiB)"
    )
    assert len(rest) == 4096
    assert rest.endswith("line-1998\nline-1999\n")
    logs = b"".join(JobService(server.ctx).logs(job_id, ADMIN)).decode()
    assert logs == text, "the API serves the capped archive"


def test_an_engine_event_finishes_its_job_without_a_full_pass(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, name = exited_without_full_passes(server, monkeypatch)
    assert not reconcile_container(server.ctx, "gpudock-someone-else-7-a0")  # a full pass's
    assert reconcile_container(server.ctx, name)

    wait_for(lambda: state(server, job_id) is JobState.SUCCEEDED, 60, "the job to finish")
    wait_for(lambda: not server.ctx.busy(job_id), 60, "its logs archived and container removed")
    assert reconcile_container(server.ctx, name), "its removal's event needs no full pass"


def test_an_event_during_its_jobs_launch_is_settled_when_the_launch_ends(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, name = exited_without_full_passes(server, monkeypatch)
    launching = threading.Event()
    server.ctx.run_once("launch", job_id, lambda: launching.wait(60))  # a launch under way
    server.ctx.wake_reconciler.clear()
    assert reconcile_container(server.ctx, name, "start"), "kept until the launch ends"
    assert reconcile_container(server.ctx, name, "die"), "kept too, beside the start"
    assert state(server, job_id) is JobState.RUNNING, "nothing decided during the launch"

    launching.set()
    wait_for(lambda: state(server, job_id) is JobState.SUCCEEDED, 60, "the job to finish")
    assert not server.ctx.wake_reconciler.is_set(), "no full pass was asked for"


def test_the_start_of_a_job_already_running_asks_the_engine_nothing(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id, name = exited_without_full_passes(server, monkeypatch)  # RUNNING in the store

    def no_inspect(_name: str) -> None:
        raise AssertionError("the engine was asked about a start its launch saw")

    monkeypatch.setattr(server.ctx.executor, "inspect", no_inspect)
    assert reconcile_container(server.ctx, name, "start")
    assert state(server, job_id) is JobState.RUNNING
