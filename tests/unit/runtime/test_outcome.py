"""How a container's end becomes a job's final state (or a retry)."""

from __future__ import annotations

from gpudock.core.job import Job, JobSpec, JobState
from gpudock.executors.base import ContainerState, ContainerStatus
from gpudock.runtime.finisher import Outcome, outcome


def job(failures: int = 0, retries: int = 0, stop: str | None = None, **spec: object) -> Job:
    return Job(
        id=7,
        spec=JobSpec(image="img", retries=retries, **spec),
        user="alice",  # type: ignore[arg-type]
        state=JobState.RUNNING,
        submitted_at=0.0,
        attempt=failures,
        failures=failures,
        stop_requested=stop,
        stop_requested_by={"cancel": "bob", "preempt": "job 9"}.get(stop or ""),
        container_name="gpudock-test-7-a0",
    )


def exited(code: int, oom: bool = False) -> ContainerStatus:
    return ContainerStatus(
        id="c",
        name="gpudock-test-7-a0",
        job_id=7,
        attempt=0,
        state=ContainerState.EXITED,
        exit_code=code,
        oom_killed=oom,
    )


def test_exit_zero_succeeds() -> None:
    assert outcome(job(), exited(0)) == Outcome(JobState.SUCCEEDED, "exited with code 0")


def test_non_zero_exit_fails_with_the_code() -> None:
    assert outcome(job(), exited(3)) == Outcome(JobState.FAILED, "exited with code 3")


def test_oom_is_named() -> None:
    result = outcome(job(memory="64MiB"), exited(137, oom=True))
    assert result.state is JobState.FAILED
    assert result.reason == "out of memory: killed after exceeding 64MiB (exit code 137)"


def test_failures_are_retried_while_retries_remain() -> None:
    result = outcome(job(failures=0, retries=2), exited(1))
    assert result == Outcome(
        JobState.PENDING, "exited with code 1; retrying (1 of 2 retries)", failed_attempt=True
    )
    assert outcome(job(failures=2, retries=2), exited(1)).state is JobState.FAILED


def test_a_vanished_container_is_lost_or_retried() -> None:
    result = outcome(job(), None)
    assert result.state is JobState.LOST
    assert result.reason == "container gpudock-test-7-a0 disappeared while the job was running"
    assert outcome(job(retries=1), None).state is JobState.PENDING


def test_requested_stops_win_over_the_exit_code() -> None:
    assert outcome(job(stop="cancel"), exited(143)) == Outcome(
        JobState.CANCELLED, "cancelled by bob"
    )
    result = outcome(job(stop="max_runtime", max_runtime="2h", retries=3), exited(143))
    assert result == Outcome(JobState.FAILED, "exceeded max_runtime of 2h00m; stopped")


def test_preemption_requeues_without_using_a_retry() -> None:
    result = outcome(job(stop="preempt", retries=0), exited(143))
    assert result == Outcome(JobState.PENDING, "preempted by job 9; requeued")


def test_a_resize_requeues_without_using_a_retry() -> None:
    resized = job(stop="resize")
    resized.stop_requested_by = "the scheduler, to grow from 2 to 4 GPUs"
    assert outcome(resized, exited(143)) == Outcome(
        JobState.PENDING,
        "restarted by the scheduler, to grow from 2 to 4 GPUs; no retry used",
    )


def test_a_job_over_its_gpu_memory_fails_with_the_watchdogs_reason_or_retries() -> None:
    reason = "GPU memory limit exceeded: used 6.1 GiB of 4.0 GiB on GPU-x (pid 1234)"
    over = job(stop="gpu_memory")
    over.stop_requested_by = reason
    assert outcome(over, exited(137)) == Outcome(JobState.FAILED, reason)
    retried = job(stop="gpu_memory", retries=1)
    retried.stop_requested_by = reason
    assert outcome(retried, exited(137)) == Outcome(
        JobState.PENDING, f"{reason}; retrying (1 of 1 retries)", failed_attempt=True
    )


def test_a_job_on_a_quarantined_gpu_is_requeued_free_or_failed_by_policy() -> None:
    hit = job(stop="gpu_fault")
    hit.stop_requested_by = "XID 48 (double bit ECC error) on GPU-x"
    why = "its GPU was quarantined: XID 48 (double bit ECC error) on GPU-x"
    assert outcome(hit, exited(137)) == Outcome(JobState.PENDING, f"{why}; requeued, no retry used")
    assert outcome(hit, exited(137), on_fault="fail") == Outcome(JobState.FAILED, why)
