"""What a cycle keeps of the running jobs for the next one never changes a Plan.

``RunningIndex`` keeps each node's summary of its running jobs (victim
order, expected ends, candidates per queue) while the node's jobs are the
very same objects; ``VictimSearch`` keeps ``could_fit_if_freed`` per node
view and ``freed_alone`` per victim. A sequence of snapshots that keep some
running jobs, drop or change others, move the clock (forwards, not at all,
or backwards) and let jobs pass their ``min_runtime``, must get the Plans
of cycles that keep nothing.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.config import SchedulerConfig
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.release import expected_end
from gpudock.scheduler.running import NodeRunning, RunningIndex, RunningMemo, _keyed, global_order
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import NodeView, RunningJob, Snapshot

from .accel.test_victim_search import blocked_jobs, clusters
from .builders import make_job, make_node, make_running, make_snapshot
from .test_reuse import assert_same_plans_as_keeping_nothing


@st.composite
def sequences(draw: st.DrawFn) -> list[Snapshot]:
    """Snapshots of one cluster whose running jobs come from the previous snapshot (the
    same objects, changed copies, or gone), some not started yet or started "later" than
    ``now`` (clock skew), with the clock moving on, standing still or going back."""
    nodes, running, now = draw(clusters())
    running = [skewed(job, now, draw) for job in running]
    blocked = draw(blocked_jobs())
    out = [Snapshot(now, tuple(nodes), tuple(blocked), tuple(running))]
    for _ in range(draw(st.integers(1, 4))):
        now += draw(st.sampled_from([0.0, 0.0, 5.0, 60.0, 200.0, 1000.0, -30.0]))
        kept: list[RunningJob] = []
        for job in running:
            fate = draw(st.sampled_from(["same"] * 6 + ["gone", "priority", "stopping"]))
            if fate == "same":
                kept.append(job)
            elif fate == "priority":
                kept.append(replace(job, priority=job.priority + 1))
            elif fate == "stopping":
                kept.append(replace(job, stopping=True))
        running = kept
        if draw(st.booleans()):
            blocked = draw(blocked_jobs())
        views: tuple[NodeView, ...] = out[-1].nodes
        out.append(Snapshot(now, views, tuple(blocked), tuple(running)))
    return out


def skewed(job: RunningJob, now: float, draw: st.DrawFn) -> RunningJob:
    """Most jobs as drawn; some not started yet, some started after ``now``."""
    start = draw(st.sampled_from(["as drawn"] * 8 + ["not yet", "after now"]))
    if start == "not yet":
        return replace(job, started_at=None)
    if start == "after now":
        return replace(job, started_at=now + 20.0)
    return job


@settings(max_examples=400, deadline=None)
@given(sequences(), st.booleans())
def test_a_sequence_of_cycles_gets_the_plans_of_cycles_that_keep_nothing(
    sequence: list[Snapshot], repeat: bool
) -> None:
    assert_same_plans_as_keeping_nothing(sequence, build_profile(SchedulerConfig()), repeat)


def test_a_summarised_node_whose_jobs_are_the_same_objects_keeps_its_summary() -> None:
    nodes = [make_node(f"n{i}").gpus(8) for i in range(3)]
    running = [
        make_running(100 + i).on(f"n{i % 3}", i // 3).started(10.0 * i).build() for i in range(9)
    ]
    memo = RunningMemo()
    first = RunningIndex(tuple(running), 1000.0, memo)
    assert all(node.ready for node in first.nodes.values())  # summarised, as step 5 does
    changed = [replace(running[0], priority=5), *running[1:]]  # a new object on n0
    second = RunningIndex(tuple(changed), 1060.0, memo)
    assert second.nodes["n1"] is first.nodes["n1"]
    assert second.nodes["n2"] is first.nodes["n2"]
    assert second.nodes["n0"] is not first.nodes["n0"]
    assert second.nodes["n0"].ready[-1].priority == 5
    assert RunningIndex(tuple(changed), 1060.0).nodes["n1"] is not first.nodes["n1"]  # no memo
    session = SchedulerSession(running=memo)
    plan = run_cycle(
        make_snapshot(nodes, [make_job(1).gpus(1)], running=changed, now=1060.0),
        build_profile(SchedulerConfig()),
        session=session,
    )
    assert plan.placements  # a free GPU on each node: the cycle reads the kept summaries


def test_a_job_passing_its_min_runtime_makes_its_node_summarised_again() -> None:
    job = make_running(7).on("n0", 0).started(1000.0).min_runtime(100.0).build()
    memo = RunningMemo()
    early = RunningIndex((job,), 1050.0, memo)
    assert early.nodes["n0"].ready == []
    later = RunningIndex((job,), 1100.0, memo)
    assert later.nodes["n0"] is not early.nodes["n0"]
    assert later.nodes["n0"].ready == [job]


def test_a_job_started_after_now_is_still_the_cheapest_victim() -> None:
    """Its run is negative, shorter than "not started yet" (0 s): the one-victim cost
    order is no longer victim order, so the search sorts the candidates at ``now``."""
    nodes = [make_node(name).gpus(2) for name in ("n1", "n3", "n5")]
    running = [
        make_running(1).on("n5", 0).started(None),  # held 1, not started: costs 0 s
        make_running(2).on("n1", 0).started(1020.0),  # held 1, started 20 s "after now"
        make_running(3).on("n3", 0, 1).started(None),  # held 2, not started: costs 0 s
        make_running(4).on("n5", 1).priority(9),
        make_running(5).on("n1", 1).priority(9),
    ]
    job = make_job(10).gpus(1).priority(5)
    snapshot = make_snapshot(nodes, [job], running=running, now=1000.0)
    plan = run_cycle(snapshot, build_profile(SchedulerConfig()))
    assert [(p.victim_id, p.preemptor_id) for p in plan.preemptions] == [(2, 10)]


@st.composite
def running_jobs(draw: st.DrawFn) -> list[RunningJob]:
    """Running jobs on a few nodes: some stopping, some not started, some with a
    ``max_runtime``, priorities and queues drawn (distinct ids)."""
    jobs: list[RunningJob] = []
    for i in range(draw(st.integers(0, 12))):
        builder = (
            make_running(i)
            .on(draw(st.sampled_from(["n0", "n1", "n2"])), *range(draw(st.integers(1, 3))))
            .priority(draw(st.integers(0, 2)))
            .queue(draw(st.sampled_from(["a", "b"])))
            .started(draw(st.sampled_from([None, 0.0, 100.0, 100.0, 950.0, 2000.0])))
        )
        if draw(st.booleans()):
            builder.max_runtime(draw(st.sampled_from([10.0, 500.0, 5000.0])))
        if draw(st.integers(0, 5)) == 0:
            builder.stopping_for(99)
        jobs.append(builder.build())
    return jobs


@settings(max_examples=300, deadline=None)
@given(running_jobs(), st.sampled_from([0.0, 900.0, 1000.0, 3000.0]))
def test_a_nodes_first_end_is_the_least_expected_end_of_its_jobs(
    jobs: list[RunningJob], now: float
) -> None:
    """``NodeRunning.first_raw_end`` inlines ``release.expected_end``: they must agree."""
    summary = NodeRunning(tuple(jobs), 0.0)
    assert summary.first_end(now) == min((expected_end(j, now) for j in jobs), default=math.inf)


@settings(max_examples=300, deadline=None)
@given(running_jobs(), running_jobs())
def test_candidates_across_nodes_are_in_global_order_by_queue_and_gpus_held(
    kept: list[RunningJob], fresh: list[RunningJob]
) -> None:
    """``_keyed`` inlines ``global_order`` and merges kept runs with fresh candidates:
    each (queue, GPUs held) list is the sorted union."""
    fresh = [replace(v, id=v.id + 100) for v in fresh]
    base = _keyed(kept, {})
    merged = _keyed(fresh, base)
    for keyed, jobs in ((base, kept), (merged, kept + fresh)):
        expected: dict[tuple[str, int], list[RunningJob]] = {}
        for v in sorted(jobs, key=global_order):
            expected.setdefault((v.queue, len(v.gpu_uuids)), []).append(v)
        assert {key: [v for _, _, v in entries] for key, entries in keyed.items()} == expected
