"""Estimated start times (``sim/start_times.py``): the queue replayed through the scheduler."""

from __future__ import annotations

from tests.unit.scheduler.builders import make_job, make_node, make_running, make_snapshot

from gpudock.config import SchedulerConfig
from gpudock.core.job import JobState
from gpudock.queue.gates import Gated
from gpudock.sim.start_times import Gates, estimate_starts

NOW = 1000.0
CONFIG = SchedulerConfig()


def test_a_job_that_fits_now_starts_at_the_next_cycle() -> None:
    snapshot = make_snapshot([make_node("n1").gpus(2)], [make_job(1).gpus(1)], now=NOW)
    estimate = estimate_starts(snapshot, CONFIG, resolution=1)[1]
    assert (estimate.start, estimate.basis) == (NOW, "now")


def test_waiting_jobs_start_when_running_jobs_reach_their_max_runtime_in_queue_order() -> None:
    running = [
        make_running(10).on("n1", 0).started(NOW - 100).max_runtime(400),  # ends NOW + 300
        make_running(11).on("n1", 1).started(NOW).max_runtime(600),  # ends NOW + 600
    ]
    jobs = [make_job(1).gpus(1).max_runtime(1000), make_job(2).gpus(2).submitted(1)]
    snapshot = make_snapshot([make_node("n1").gpus(2)], jobs, now=NOW, running=running)
    estimates = estimate_starts(snapshot, CONFIG, resolution=1)
    assert (estimates[1].start, estimates[1].basis) == (NOW + 300, "max_runtime")
    assert estimates[2].start == NOW + 300 + 1000  # behind job 1, which holds a GPU until then


def test_a_job_waiting_for_host_memory_starts_when_the_job_holding_it_ends() -> None:
    """GPU 1 is free but job 10 holds 48 of the 64GiB: job 1 starts when job 10 ends, and
    job 2 after job 1 (each takes the memory the other needs)."""
    running = [make_running(10).on("n1", 0).memory("48GiB").started(NOW).max_runtime(300)]
    jobs = [
        make_job(1).gpus(1).memory("32GiB").max_runtime(500),
        make_job(2).gpus(1).memory("40GiB").submitted(1),
    ]
    node = make_node("n1").gpus(2).memory("64GiB")
    snapshot = make_snapshot([node], jobs, now=NOW, running=running)
    estimates = estimate_starts(snapshot, CONFIG, resolution=1)
    assert (estimates[1].start, estimates[1].basis) == (NOW + 300, "max_runtime")
    assert estimates[2].start == NOW + 300 + 500


def test_a_running_job_without_a_bound_makes_the_estimate_unknown_or_uses_its_queue_default() -> (
    None
):
    running = [make_running(10).on("n1", 0, 1).queue("batch").started(NOW - 50)]
    snapshot = make_snapshot(
        [make_node("n1").gpus(2)], [make_job(1).gpus(1)], now=NOW, running=running
    )
    unknown = estimate_starts(snapshot, CONFIG, resolution=1)[1]
    assert (unknown.start, unknown.basis) == (None, "unknown")
    assert "no max_runtime" in unknown.detail
    defaulted = estimate_starts(snapshot, CONFIG, defaults={"batch": 3600}, resolution=1)[1]
    assert (defaulted.start, defaulted.basis) == (NOW - 50 + 3600, "queue_default")


def test_dependencies_and_array_limits_are_replayed_with_the_gates() -> None:
    running = [make_running(10).on("n1", 0).started(NOW).max_runtime(100)]
    jobs = [make_job(i).gpus(1).max_runtime(50) for i in (1, 2, 3, 4)]
    gated = {
        1: Gated(1, after_ok=(10,)),  # waits for job 10 though a GPU is free
        2: Gated(2, array_id=2, array_limit=1),
        3: Gated(3, array_id=2, array_limit=1),
        4: Gated(4, after_ok=(99,)),  # its dependency failed
    }
    gates = Gates(gated, {10: JobState.RUNNING, 99: JobState.FAILED}, {})
    snapshot = make_snapshot([make_node("n1").gpus(4)], jobs, now=NOW, running=running)
    estimates = estimate_starts(snapshot, CONFIG, gates, resolution=1)
    assert estimates[1].start == NOW + 100
    assert (estimates[2].start, estimates[3].start) == (NOW, NOW + 50)  # one task at a time
    assert estimates[4].start is None and "will be cancelled" in estimates[4].detail


def test_a_job_that_never_fits_is_unknown_with_the_filters_reason() -> None:
    nodes = [make_node("n1").gpus(2), make_node("n2").gpus(8).label("zone", "a")]
    jobs = [make_job(1).gpus(4).selector("zone", "eu"), make_job(2).gpus(4)]
    snapshot = make_snapshot(nodes, jobs, now=NOW)
    before = repr(snapshot)
    found = estimate_starts(snapshot, CONFIG, resolution=1)
    assert found[1].start is None
    assert found[1].detail == (
        "unknown: no node could ever run it: no node matches node selector zone=eu"
    )
    assert found[2].start == NOW  # what fits starts; the rest is as it was
    assert repr(snapshot) == before


def test_the_clock_moves_in_whole_steps_so_an_estimate_is_never_early() -> None:
    running = [make_running(10).on("n1", 0).started(NOW).max_runtime(61)]
    snapshot = make_snapshot(
        [make_node("n1").gpus(1)], [make_job(1).gpus(1)], now=NOW, running=running
    )
    assert estimate_starts(snapshot, CONFIG)[1].start == NOW + 120  # 61 s, rounded up to 2 min
    assert estimate_starts(snapshot, CONFIG, resolution=1)[1].start == NOW + 61


def test_with_wanted_jobs_the_replay_stops_once_they_have_started() -> None:
    running = [make_running(10).on("n1", 0).started(NOW).max_runtime(100)]
    jobs = [make_job(1).gpus(1).max_runtime(100), make_job(2).gpus(1).submitted(1)]
    snapshot = make_snapshot([make_node("n1").gpus(1)], jobs, now=NOW, running=running)
    estimates = estimate_starts(snapshot, CONFIG, wanted=[1], resolution=1)
    assert estimates[1].start == NOW + 100
    assert estimates[2].start is None  # not replayed that far
