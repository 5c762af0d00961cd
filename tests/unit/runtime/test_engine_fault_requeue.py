"""A launch that fails by the engine's fault requeues the job and spends no retry."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gpudock.config import ServerConfig
from gpudock.core.job import JobSpec, JobState
from gpudock.executors.base import (
    ContainerStatus,
    EngineFault,
    Executor,
    ExecutorUnavailable,
    LaunchError,
    LaunchRequest,
    ListedContainer,
)
from gpudock.runtime import launcher
from gpudock.runtime.context import RuntimeContext
from gpudock.server import build_server
from gpudock.store import jobs as job_store

ALREADY_EXISTS = "task 0123456789abcdef0123: already exists"


class FailingEngine(Executor):
    """An executor whose every launch fails with ``error``; it records removals."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error
        self.removed: list[str] = []
        self.launched: list[str] = []

    def _ping(self) -> None:
        return None

    def _launch(self, request: LaunchRequest) -> ContainerStatus:
        self.launched.append(request.name)
        raise self.error

    def _list(self) -> list[ListedContainer]:
        return []

    def _inspect(self, name_or_id: str) -> ContainerStatus | None:
        return None

    def _stop(self, name_or_id: str, grace_seconds: float) -> None:
        return None

    def _logs(self, name_or_id: str, follow: bool = False) -> Iterator[bytes]:
        return iter(())

    def _remove(self, name_or_id: str) -> None:
        self.removed.append(name_or_id)


def runtime(tmp_path: Path, error: Exception) -> tuple[RuntimeContext, FailingEngine]:
    engine = FailingEngine(error)
    server = build_server(tmp_path, ServerConfig(), executor=engine)
    return server.ctx, engine


def allocated_job(ctx: RuntimeContext, retries: int = 1) -> int:
    """A CPU-only job moved to ALLOCATED on this node, as the scheduler would."""
    with ctx.db.write() as session:
        job = job_store.insert_job(session, JobSpec(image="busybox", retries=retries), "alice", 0.0)
        assert job_store.transition(
            session, job.id, JobState.PENDING, JobState.ALLOCATED, 1.0, node=ctx.node_name
        )
    return job.id


def stored(ctx: RuntimeContext, job_id: int) -> tuple[JobState, int, int, str | None]:
    with ctx.db.read() as session:
        job = job_store.get_job(session, job_id)
    assert job is not None
    return job.state, job.attempt, job.failures, job.reason


def test_an_engine_fault_requeues_without_spending_a_retry(tmp_path: Path) -> None:
    ctx, engine = runtime(tmp_path, EngineFault(ALREADY_EXISTS))
    job_id = allocated_job(ctx, retries=1)
    launcher.launch(ctx, job_id)
    state, attempt, failures, reason = stored(ctx, job_id)
    assert (state, attempt, failures) == (JobState.PENDING, 1, 0)
    assert reason is not None and "no retry used" in reason and "already exists" in reason
    assert engine.removed == engine.launched  # its half-made container, through the engine
    ctx.shutdown()


def test_an_engine_fault_requeues_a_job_that_has_no_retries(tmp_path: Path) -> None:
    ctx, _ = runtime(tmp_path, EngineFault(ALREADY_EXISTS, removed=True))
    job_id = allocated_job(ctx, retries=0)
    launcher.launch(ctx, job_id)
    assert stored(ctx, job_id)[:3] == (JobState.PENDING, 1, 0)
    ctx.shutdown()


def test_the_jobs_own_fault_still_fails_it(tmp_path: Path) -> None:
    ctx, _ = runtime(tmp_path, LaunchError('exec: "nope": executable file not found in $PATH'))
    job_id = allocated_job(ctx, retries=0)
    launcher.launch(ctx, job_id)
    assert stored(ctx, job_id)[0] is JobState.FAILED
    ctx.shutdown()


def test_a_broken_engine_cannot_requeue_a_job_forever(tmp_path: Path) -> None:
    ctx, _ = runtime(tmp_path, EngineFault(ALREADY_EXISTS, removed=True))
    job_id = allocated_job(ctx)
    for attempt in range(launcher.ENGINE_REQUEUE_LIMIT):
        launcher.launch(ctx, job_id)
        assert stored(ctx, job_id)[:2] == (JobState.PENDING, attempt + 1)
        with ctx.db.write() as session:
            job_store.transition(
                session, job_id, JobState.PENDING, JobState.ALLOCATED, 2.0, node=ctx.node_name
            )
    launcher.launch(ctx, job_id)
    state, _, failures, reason = stored(ctx, job_id)
    assert state is JobState.FAILED and failures == 0
    assert reason is not None and "requeues after engine faults" in reason
    ctx.shutdown()


def test_a_container_that_cannot_be_removed_yet_keeps_the_job_starting(tmp_path: Path) -> None:
    ctx, engine = runtime(tmp_path, EngineFault(ALREADY_EXISTS, removed=False))

    def unreachable(name: str) -> None:
        raise ExecutorUnavailable("connection refused")

    engine.remove = unreachable  # type: ignore[method-assign]
    job_id = allocated_job(ctx)
    launcher.launch(ctx, job_id)
    assert stored(ctx, job_id)[:3] == (JobState.STARTING, 0, 0)
    ctx.shutdown()
