"""A cycle that words no pending reasons (``run_cycle(..., explain=False)``) decides the same.

The simulator reads only a Plan's placements, gangs and preemptions, so it
skips steps 4-4c (wording why blocked jobs wait). These specs hold it to the
same decisions as a cycle that words everything, on random clusters without
running jobs (every placement path), on clusters full of running jobs
(EASY reservations and preemption), and with queues (admission, reclaim);
whatever reasons it still gives are among the full Plan's.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.config import SchedulerConfig
from gpudock.queue.strategies import DEFAULT
from gpudock.scheduler.admission import QueuePolicy
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.framework import Profile
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import JobRequest, NodeView, Plan, RunningJob, Snapshot

from .accel.test_victim_search import blocked_jobs, clusters
from .builders import make_job, make_node, make_running, make_snapshot
from .test_properties import configs, snapshots
from .test_queue_properties import scenario


def assert_same_decisions(
    snapshot: Snapshot,
    profile: Profile,
    *,
    index: bool = True,
    queues: QueuePolicy | None = None,
    strict: bool = False,
) -> Plan:
    queueing = (*DEFAULT, "strict-fifo") if strict else DEFAULT
    full = run_cycle(snapshot, profile, index=index, queues=queues, queueing=queueing)
    bare = run_cycle(
        snapshot, profile, index=index, queues=queues, queueing=queueing, explain=False
    )
    assert bare.placements == full.placements
    assert bare.gangs == full.gangs
    assert bare.preemptions == full.preemptions
    for job_id, reasons in bare.pending.items():
        assert all(reason in full.pending[job_id] for reason in reasons)
    return full


@settings(max_examples=200, deadline=None)
@given(snapshots(), configs, st.booleans(), st.booleans())
def test_placements_and_gangs_are_the_same_without_reasons(
    snapshot: Snapshot, config: SchedulerConfig, index: bool, strict: bool
) -> None:
    assert_same_decisions(snapshot, build_profile(config), index=index, strict=strict)


@settings(max_examples=200, deadline=None)
@given(clusters(), blocked_jobs())
def test_reservations_and_preemptions_are_the_same_without_reasons(
    cluster: tuple[list[NodeView], list[RunningJob], float], jobs: list[JobRequest]
) -> None:
    nodes, running, now = cluster
    snapshot = Snapshot(now, tuple(nodes), tuple(jobs), tuple(running))
    assert_same_decisions(snapshot, build_profile(SchedulerConfig()))


@settings(max_examples=100, deadline=None)
@given(scenario())
def test_queue_decisions_are_the_same_without_reasons(
    drawn: tuple[Snapshot, SchedulerConfig],
) -> None:
    snapshot, config = drawn
    queues = QueuePolicy.from_config(config.queues, snapshot.queue_history)
    assert_same_decisions(snapshot, build_profile(config), queues=queues)


def test_a_cycle_that_reserves_backfills_and_preempts_decides_the_same() -> None:
    """A fixed example that takes every step the strategies above may miss at once."""
    nodes = [make_node(f"n{i}").gpus(8) for i in range(3)]
    running = [
        make_running(100).on("n0", 0, 1, 2, 3).priority(0).started(0).max_runtime(600),
        make_running(101).on("n1", 0, 1, 2, 3, 4, 5).priority(5).started(10),
        make_running(102).on("n2", 0).share("20GiB").priority(0).started(5),
    ]
    jobs = [
        make_job(1).gpus(8).priority(9),  # preempts
        make_job(7).gpus(8).submitted(1),  # blocked: the EASY reservation
        make_job(2).gpus(2).max_runtime(60),  # backfills
        make_job(3).gpus(4).nodes(2),  # a gang
        make_job(4).gpu_memory("10GiB"),  # a share
        make_job(5).gpus(16),  # never fits one node
    ]
    snapshot = make_snapshot(nodes, jobs, now=100.0, running=running)
    full = assert_same_decisions(snapshot, build_profile(SchedulerConfig()))
    assert full.placements and full.preemptions
