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
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from tests.kit.docker import TEST_IMAGE

from gpudock.config import ExecutorConfig
from gpudock.core.job import Job, JobSpec, JobState, container_name
from gpudock.executors.docker import DockerExecutor
from gpudock.services.job_logs import LogReader
from gpudock.services.jobs import JobService

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
