"""A cycle pauses the garbage collector and leaves no cyclic garbage behind.

``run_cycle`` disables the cyclic collector while it runs (``collector_paused``)
because everything a cycle drops is freed by reference counting. These specs
keep that true: a cycle that exercises every step (placements, shares, a gang,
an EASY reservation, backfill, preemption, reasons) must leave nothing for the
collector, and must hand the collector back as it found it.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator

import pytest
from tests.unit.scheduler.builders import make_job, make_node, make_running, make_snapshot

from gpudock.config import SchedulerConfig
from gpudock.gcpause import collector_paused
from gpudock.scheduler.cycle import schedule
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import Snapshot


def busy_snapshot() -> Snapshot:
    nodes = [make_node(f"n{i}").gpus(8) for i in range(3)]
    running = [
        make_running(100).on("n0", 0, 1, 2, 3).priority(0).started(0).max_runtime(600),
        make_running(103).on("n0", 4, 5, 6, 7).priority(0).started(20),
        make_running(101).on("n1", 0, 1, 2, 3, 4, 5).priority(5).started(10),
        make_running(102).on("n2", 0).share("20GiB").priority(0).started(5),
    ]
    jobs = [
        make_job(1).gpus(8).priority(9),  # preempts two jobs (multi-victim bounds)
        make_job(7).gpus(8).submitted(1),  # blocked: the EASY reservation
        make_job(2).gpus(2).max_runtime(60),  # backfills
        make_job(3).gpus(4).nodes(2),  # a gang
        make_job(4).gpu_memory("10GiB"),  # a share
        make_job(5).gpus(16),  # never fits one node: reasons
        make_job(6).gpus(1).model("H100"),  # model missing: reasons
    ]
    return make_snapshot(nodes, jobs, now=100.0, running=running)


@pytest.fixture
def collector_off() -> Iterator[None]:
    """The collector paused around the test (as around a cycle): only ``gc.collect`` runs.

    The test process may hold other threads (left by earlier tests of a whole run) whose
    garbage would be counted as the cycle's: the interpreter's switch interval is raised
    meanwhile, and each of them is let run once to take it up, so none runs while this
    thread computes (the cycle does no I/O, so it never gives the interpreter lock away).
    """
    interval = sys.getswitchinterval()
    sys.setswitchinterval(2.0)
    try:
        time.sleep(0.05)  # every thread waiting for the lock waits again, with 2 s
        with collector_paused():
            yield
    finally:
        sys.setswitchinterval(interval)


@pytest.mark.parametrize("kept", [False, True], ids=["pure", "session"])
def test_a_cycle_leaves_no_cyclic_garbage(collector_off: None, kept: bool) -> None:
    """With a session, the cycle also replaces what the session kept from the last one."""
    snapshot = busy_snapshot()
    config = SchedulerConfig()
    session = SchedulerSession() if kept else None
    schedule(snapshot, config, session=session)  # imports and caches settle first
    gc.collect()
    plan = schedule(snapshot, config, session=session)
    assert plan.placements, "the scenario should place"
    assert {p.victim_id for p in plan.preemptions} == {100, 103}, "and preempt two jobs"
    assert {3, 5, 6, 7} <= set(plan.pending), "the scenario should leave jobs with reasons"
    assert gc.collect() == 0, "a cycle created reference cycles: its garbage waits for the GC"


def test_the_collector_is_paused_inside_and_restored_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_disabled_collector_stays_disabled(collector_off: None) -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_the_collector_is_restored_when_the_cycle_raises() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a policy failed")
    assert gc.isenabled()


@pytest.mark.parametrize("kept", [False, True], ids=["pure", "session"])
def test_a_cycle_choosing_several_victims_leaves_no_cyclic_garbage(
    collector_off: None, kept: bool
) -> None:
    nodes = [make_node("n0").gpus(8)]
    running = [make_running(100 + i).on("n0", i).priority(0).started(i) for i in range(8)]
    snapshot = make_snapshot(nodes, [make_job(1).gpus(4).priority(9)], now=100.0, running=running)
    config = SchedulerConfig()
    session = SchedulerSession() if kept else None
    schedule(snapshot, config, session=session)  # imports and caches settle first
    gc.collect()
    plan = schedule(snapshot, config, session=session)
    assert len(plan.preemptions) == 4, "the scenario should stop several jobs on one node"
    assert gc.collect() == 0, "a cycle created reference cycles: its garbage waits for the GC"


def test_leaving_the_pause_starts_no_collection() -> None:
    """The collection a cycle's allocations call for runs after the cycle, not as it ends."""
    started: list[int] = []

    def record(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.collect()
    gc.callbacks.append(record)
    try:
        with collector_paused():
            kept = [[i] for i in range(50_000)]  # far over the young generation's threshold
        during = len(started)  # read without allocating: that would collect
        assert during == 0, "a collection started inside the pause or as it ended"
        assert gc.isenabled()
        more = [[i] for i in range(10)]  # the caller's next allocations collect
        assert started, "the collection the cycle called for runs at the next allocation"
    finally:
        gc.callbacks.remove(record)
    assert len(kept) + len(more) == 50_010
