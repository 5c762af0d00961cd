"""An ended attempt's logs while its container goes away, on the real dockerd.

The finisher archives an attempt's output and only then removes its
container; a reader that found no archive yet reads the container. If the
engine refuses that read (the container is being removed, or it never kept a
log), the reader serves the archive, complete by then, rather than an error.
A container on Docker's ``none`` log driver is a deterministic refusal; the
archive is completed at the moment the reader asks the engine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from tests.kit.docker import TEST_IMAGE

from gpudock.config import ExecutorConfig
from gpudock.core.job import Job, JobSpec, JobState, container_name
from gpudock.executors.docker import DockerExecutor
from gpudock.gpus import emulated_inventory
from gpudock.scheduler.snapshot import Placement, Plan
from gpudock.services.job_logs import LogReader
from gpudock.services.jobs import JobService
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.applier import apply_plan
from gpudock.store.db import Database

pytestmark = pytest.mark.docker

JOB_ID = 7


class ArchivedMeanwhile(DockerExecutor):
    """The real executor; ``archive`` (when given) is written as a log read begins, as
    the finisher completes it while the reader turns to the engine."""

    archive: tuple[Path, bytes] | None = None

    def logs(self, name_or_id: str, follow: bool = False) -> Iterator[bytes]:
        if self.archive is not None:
            path, content = self.archive
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        return super().logs(name_or_id, follow)


def reader(tmp_path: Path, instance_id: str, docker_api: Any, archived: bytes | None) -> LogReader:
    """A reader of job 7's ended first attempt, whose container reads no log; with
    ``archived``, its archive is completed while the reader asks the engine."""
    name = container_name(instance_id, JOB_ID, 1)
    docker_api.containers.create(
        TEST_IMAGE,
        ["true"],
        name=name,
        labels={"gpudock.instance": instance_id},
        log_config={"type": "none"},
    )
    executor = ArchivedMeanwhile(ExecutorConfig(), instance_id)
    if archived is not None:
        executor.archive = (tmp_path / f"job-{JOB_ID}" / "attempt-1.log", archived)
    ctx = SimpleNamespace(log_dir=tmp_path, executor=executor)
    service = cast(JobService, SimpleNamespace(ctx=ctx))
    job = Job(
        id=JOB_ID,
        spec=JobSpec(image=TEST_IMAGE),
        user="rita",
        state=JobState.FAILED,
        submitted_at=0.0,
        attempt=1,
        container_name=name,
    )
    return LogReader(service, job, follow=False)


def test_a_refused_read_of_an_ended_container_serves_its_archive(
    tmp_path: Path, instance_id: str, docker_api: Any
) -> None:
    assert b"".join(reader(tmp_path, instance_id, docker_api, b"try\n")) == b"try\n"


def test_a_refused_read_without_an_archive_says_why(
    tmp_path: Path, instance_id: str, docker_api: Any
) -> None:
    said = b"".join(reader(tmp_path, instance_id, docker_api, None)).decode()
    assert said.startswith("[gpudock] cannot read logs: Docker unreachable:"), said


def test_an_earlier_attempt_and_the_unarchived_last_one_are_each_headed(
    tmp_path: Path, instance_id: str, docker_api: Any
) -> None:
    earlier = tmp_path / f"job-{JOB_ID}" / "attempt-0.log"
    earlier.parent.mkdir(parents=True)
    earlier.write_bytes(b"first\n")
    said = b"".join(reader(tmp_path, instance_id, docker_api, b"second\n"))
    assert said == b"--- attempt 0 ---\nfirst\n--- attempt 1 ---\nsecond\n"


def test_an_engine_that_answers_nothing_yet_waits_for_the_archive(
    tmp_path: Path, instance_id: str, docker_api: Any
) -> None:
    """An engine may answer an ended container's logs with nothing for a moment (Swarm's
    service logs do): the reader waits for the finisher's archive instead of ending empty."""
    name = container_name(instance_id, JOB_ID, 0)
    docker_api.containers.create(
        TEST_IMAGE, ["true"], name=name, labels={"gpudock.instance": instance_id}
    )
    archive = tmp_path / f"job-{JOB_ID}" / "attempt-0.log"
    writer = threading.Timer(0.3, lambda: (archive.parent.mkdir(), archive.write_bytes(b"done\n")))
    ctx = SimpleNamespace(log_dir=tmp_path, executor=DockerExecutor(ExecutorConfig(), instance_id))
    job = Job(
        id=JOB_ID,
        spec=JobSpec(image=TEST_IMAGE),
        user="rita",
        state=JobState.SUCCEEDED,
        submitted_at=0.0,
        attempt=0,
        container_name=name,
    )
    writer.start()
    try:
        said = b"".join(LogReader(cast(JobService, SimpleNamespace(ctx=ctx)), job, follow=False))
    finally:
        writer.join()
    assert said == b"done\n"


def test_a_follow_of_a_container_not_started_yet_waits_for_its_output(
    tmp_path: Path, instance_id: str, docker_api: Any
) -> None:
    """A STARTING job's container exists but has not started, and the engine answers a
    follow of it with nothing at once: the reader follows again until the output comes,
    instead of ending empty (``gpudock logs -f`` printed nothing for a job that ran)."""
    db = Database.open(f"sqlite:///{tmp_path / 'gpudock.db'}")
    node = emulated_inventory("n1", "1xH100-80GB")
    with db.write() as session:
        inv_store.register_node(session, node, 0.0)
        job_id = job_store.insert_job(session, JobSpec(image=TEST_IMAGE, gpus=1), "rita", 0.0).id
    apply_plan(db, Plan(placements=[Placement(job_id, "n1", (node.gpus[0].uuid,), None)]), 1.0)
    name = container_name(instance_id, job_id, 0)
    with db.write() as session:
        job_store.transition(
            session, job_id, JobState.ALLOCATED, JobState.STARTING, 2.0, container_name=name
        )
        job = job_store.get_job(session, job_id)
    assert job is not None
    container = docker_api.containers.create(
        TEST_IMAGE,
        ["sh", "-c", "echo one; echo two"],
        name=name,
        labels={"gpudock.instance": instance_id},
    )
    ctx = SimpleNamespace(
        log_dir=tmp_path, db=db, executor=DockerExecutor(ExecutorConfig(), instance_id)
    )
    said: list[bytes] = []
    follower = threading.Thread(
        target=lambda: said.extend(
            LogReader(cast(JobService, SimpleNamespace(ctx=ctx)), job, follow=True)
        )
    )
    follower.start()
    try:
        time.sleep(0.6)
        assert follower.is_alive(), f"the follow ended before the container started: {said}"
        with db.write() as session:
            job_store.transition(
                session, job_id, JobState.STARTING, JobState.RUNNING, 3.0, started_at=3.0
            )
        container.start()
    finally:
        follower.join(timeout=30)
        db.close()
    assert not follower.is_alive()
    assert b"".join(said) == b"one\ntwo\n"
