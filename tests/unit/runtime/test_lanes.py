"""The runtime's lanes: work that frees GPUs never waits behind launches or log copies,
and work for a job that holds GPUs goes ahead of the rest in its lane."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

from gpudock.config import ServerConfig
from gpudock.executors.base import Executor
from gpudock.runtime.context import LANE_OF, LANE_SPARE, LANE_WORKERS, RuntimeContext
from gpudock.runtime.lanes import Lane
from gpudock.store.db import Database


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[RuntimeContext]:
    db = Database.open(f"sqlite:///{tmp_path / 'gpudock.db'}")
    # The lanes never call the executor; none is needed to exercise them.
    context = RuntimeContext(
        db=db,
        executor=cast(Executor, None),
        config=ServerConfig(),
        node_name="n0",
        instance_id="test",
        log_dir=tmp_path,
    )
    yield context
    context.shutdown()
    db.close()


def fill(ctx: RuntimeContext, kind: str, release: threading.Event) -> None:
    """Occupy every worker of ``kind``'s lane, plus a backlog behind them."""
    workers = LANE_WORKERS[LANE_OF[kind]]
    for job_id in range(1000, 1000 + 3 * workers):
        ctx.run_once(kind, job_id, lambda: release.wait(30))


@pytest.mark.parametrize("blocked", ["launch", "archive"])
@pytest.mark.parametrize("urgent", ["finish", "stop"])
def test_work_that_frees_gpus_runs_while_another_lane_is_saturated(
    ctx: RuntimeContext, blocked: str, urgent: str
) -> None:
    release = threading.Event()
    try:
        fill(ctx, blocked, release)
        done = threading.Event()
        future = ctx.run_once(urgent, 1, done.set)
        assert future is not None
        assert done.wait(10), f"{urgent} waited behind a full {blocked} lane"
    finally:
        release.set()


def test_the_same_work_for_the_same_job_is_not_queued_twice(ctx: RuntimeContext) -> None:
    release = threading.Event()
    try:
        assert ctx.run_once("archive", 7, lambda: release.wait(30)) is not None
        assert ctx.in_flight("archive", 7)
        assert ctx.run_once("archive", 7, lambda: None) is None
        assert not ctx.in_flight("finish", 7)
    finally:
        release.set()


def test_a_follow_up_runs_once_the_jobs_last_work_ends(ctx: RuntimeContext) -> None:
    launch, finish, ran = threading.Event(), threading.Event(), []
    assert not ctx.after_work(7, "c", lambda: ran.append("now")), "nothing in flight"
    ctx.run_once("launch", 7, lambda: launch.wait(30))
    ctx.run_once("finish", 7, lambda: finish.wait(30))

    assert ctx.after_work(7, "c", lambda: ran.append("first"))
    assert ctx.after_work(7, "c", lambda: ran.append("second")), "kept, under the waiting one"
    assert ctx.after_work(7, "d", lambda: ran.append("other"))
    launch.set()
    assert not _settles(lambda: bool(ran)), "the finish is still in flight"
    finish.set()
    assert _settles(lambda: len(ran) == 2 and not ctx.busy(7))
    assert ran == ["first", "other"]
    assert not ctx.after_work(7, "c", lambda: None), "nothing is left in flight"


def test_a_follow_up_that_fails_is_logged_and_the_lane_goes_on(
    ctx: RuntimeContext, caplog: pytest.LogCaptureFixture
) -> None:
    release, done = threading.Event(), threading.Event()
    ctx.run_once("launch", 7, lambda: release.wait(30))

    def broken() -> None:
        raise RuntimeError("boom")

    assert ctx.after_work(7, "c", broken)
    release.set()
    assert _settles(lambda: "follow-up of job 7 failed" in caplog.text)
    ctx.run_once("launch", 8, done.set)
    assert done.wait(10)


def _settles(check: Callable[[], bool], seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return check()


def test_a_gpu_jobs_launch_goes_ahead_of_queued_cpu_only_launches(ctx: RuntimeContext) -> None:
    release, order = threading.Event(), []
    workers = LANE_WORKERS["launch"]
    for job_id in range(workers):  # every launch worker busy
        ctx.run_once("launch", job_id, lambda: release.wait(30))
    for job_id in range(100, 110):  # a backlog of CPU-only launches
        ctx.run_once("launch", job_id, lambda j=job_id: order.append(j))
    for job_id in range(200, 200 + LANE_SPARE["launch"] + 2):
        ctx.run_once("launch", job_id, lambda j=job_id: order.append(j), gpus=True)
    gpu_jobs = list(range(200, 200 + LANE_SPARE["launch"] + 2))
    assert _settles(lambda: order == gpu_jobs), "on the spare workers, while the backlog waits"
    release.set()
    assert _settles(lambda: len(order) == len(gpu_jobs) + 10)
    assert order[len(gpu_jobs) :] == list(range(100, 110)), "then the others, in their order"


def test_queued_gpu_work_takes_the_next_free_worker(ctx: RuntimeContext) -> None:
    release, order = threading.Event(), []
    busy = LANE_WORKERS["launch"] + LANE_SPARE["launch"]
    for job_id in range(busy):  # every worker, the spare ones too, busy with GPU work
        ctx.run_once("launch", job_id, lambda: release.wait(30), gpus=True)
    ctx.run_once("launch", 100, lambda: order.append(100))
    ctx.run_once("launch", 200, lambda: order.append(200), gpus=True)
    release.set()
    assert _settles(lambda: len(order) == 2)
    assert order == [200, 100]


def test_other_work_never_takes_the_spare_workers_and_shutdown_cancels_the_queue() -> None:
    lane, release, running = Lane("t", 2, spare=1), threading.Event(), []
    lock = threading.Lock()

    def work(kind: str) -> None:
        with lock:
            running.append(kind)
        release.wait(30)

    futures = [lane.submit(lambda: work("cpu")) for _ in range(5)]
    assert _settles(lambda: len(running) == 2)
    assert not _settles(lambda: len(running) > 2, 0.2), "the spare worker stays free"
    gpu = lane.submit(lambda: work("gpu"), first=True)
    assert _settles(lambda: running.count("gpu") == 1), "GPU work runs on the spare worker"
    assert lane.queued() == 3
    stopper = threading.Thread(target=lane.shutdown)
    stopper.start()
    assert _settles(lambda: all(f.cancelled() for f in futures[2:]))
    assert not any(f.done() for f in [*futures[:2], gpu]), "running work is never interrupted"
    release.set()
    stopper.join(10)
    assert all(f.done() and not f.cancelled() for f in [*futures[:2], gpu])
    with pytest.raises(RuntimeError, match="shut down"):
        lane.submit(lambda: None)
