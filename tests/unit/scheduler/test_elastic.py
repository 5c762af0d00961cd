"""Elastic jobs in the cycle (``scheduler/elastic.py``): they start at their minimum, grow
only into GPUs no job waits for, and give back what they hold above it first."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpudock.config import SchedulerConfig
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import Plan, Preemption, Resize, Snapshot

from .builders import (
    assert_pending,
    assert_placed,
    gpu_indices,
    make_job,
    make_node,
    make_running,
    make_snapshot,
    run,
)


def both_paths(snapshot: Snapshot) -> Plan:
    """The Plan, checked equal on the generic path and the capacity index."""
    profile = build_profile(SchedulerConfig())
    generic = run_cycle(snapshot, profile, index=False)
    indexed = run_cycle(snapshot, profile, index=True)
    assert generic == indexed
    return indexed


def test_an_elastic_job_alone_takes_up_to_its_maximum() -> None:
    plan = both_paths(make_snapshot([make_node("n0").gpus(8)], [make_job(1).elastic(2, 4)]))
    assert len(assert_placed(plan, 1, node="n0").gpu_uuids) == 4


def test_an_elastic_job_takes_what_is_free_between_its_minimum_and_maximum() -> None:
    running = [make_running(9).on("n0", 0, 1)]
    snapshot = make_snapshot([make_node("n0").gpus(4)], [make_job(1).elastic(1, 4)], 0, running)
    assert gpu_indices(assert_placed(both_paths(snapshot), 1)) == [2, 3]


def test_an_elastic_job_stays_at_its_minimum_while_another_job_waits() -> None:
    jobs = [make_job(1).elastic(2, 4), make_job(2).gpus(8)]
    plan = both_paths(make_snapshot([make_node("n0").gpus(4)], jobs))
    assert len(assert_placed(plan, 1).gpu_uuids) == 2
    assert_pending(plan, 2)


def test_an_elastic_job_waits_until_its_minimum_fits() -> None:
    running = [make_running(9).on("n0", 0, 1, 2)]
    snapshot = make_snapshot([make_node("n0").gpus(4)], [make_job(1).elastic(2, 4)], 0, running)
    assert_pending(both_paths(snapshot), 1, layer="devices")


def test_a_running_restartable_job_is_resized_into_free_gpus() -> None:
    running = [make_running(5).on("n0", 0, 1).elastic(2, 4)]
    plan = both_paths(make_snapshot([make_node("n0").gpus(8)], [], 0, running))
    assert plan.resizes == [Resize(5, "n0", 2, 4)]


def test_a_job_without_elastic_restart_is_never_resized() -> None:
    running = [make_running(5).on("n0", 0, 1)]
    assert run(make_snapshot([make_node("n0").gpus(8)], [], 0, running)).resizes == []


def test_no_resize_while_a_job_waits_for_gpus() -> None:
    running = [make_running(5).on("n0", 0, 1).elastic(2, 4), make_running(6).on("n1", 0)]
    nodes = [make_node("n0").gpus(3), make_node("n1").gpus(1)]
    plan = both_paths(make_snapshot(nodes, [make_job(1).gpus(2).priority(-1)], 0, running))
    assert plan.resizes == []
    assert_pending(plan, 1)


def test_a_resize_takes_only_gpus_of_the_model_the_job_holds() -> None:
    node = make_node("n0").gpus(2, model="A100-80GB")
    other = make_node("n0").gpus(4, model="H100-80GB").build().gpus[2:]
    view = node.build()
    view = replace(view, gpus=view.gpus + tuple(replace(g, index=g.index) for g in other))
    running = [make_running(5).on("n0", 0, 1).elastic(2, 4)]
    assert run(make_snapshot([view], [], 0, running)).resizes == []


def test_a_stopping_or_maximal_job_is_not_resized() -> None:
    running = [
        make_running(5).on("n0", 0, 1).elastic(2, 4).stopping_for(7),
        make_running(6).on("n0", 2, 3, 4, 5).elastic(2, 4),
    ]
    assert run(make_snapshot([make_node("n0").gpus(8)], [], 0, running)).resizes == []


def test_two_jobs_do_not_grow_into_the_same_free_gpus() -> None:
    running = [
        make_running(5).on("n0", 0, 1).elastic(2, 4),
        make_running(6).on("n0", 2, 3).elastic(2, 4),
    ]
    plan = run(make_snapshot([make_node("n0").gpus(6)], [], 0, running))
    assert plan.resizes == [Resize(5, "n0", 2, 4)]


def test_a_blocked_job_takes_back_gpus_above_the_elastic_minimum_first() -> None:
    """Job 6 (fixed, lower priority) would be the usual victim; the elastic job 5
    gives back its two GPUs above its minimum instead, and restarts at it."""
    running = [
        make_running(5).on("n0", 0, 1, 2, 3).elastic(2, 4).priority(5),
        make_running(6).on("n0", 4, 5, 6, 7).priority(0),
    ]
    job = make_job(1).gpus(2).priority(10)
    plan = both_paths(make_snapshot([make_node("n0").gpus(8)], [job], 0, running))
    assert plan.preemptions == [
        Preemption(5, 1, "job 1 (taking back GPUs above the elastic minimum)")
    ]
    assert_pending(plan, 1, layer="priority", contains="restarting elastic job 5 at its minimum")


def test_a_job_preempts_as_usual_when_the_elastic_surplus_is_too_small() -> None:
    running = [
        make_running(5).on("n0", 0, 1, 2).elastic(2, 4),
        make_running(6).on("n0", 3, 4).priority(-5),
    ]
    job = make_job(1).gpus(2).priority(10)
    snapshot = make_snapshot([make_node("n0").gpus(5)], [job.build()], 0, running)
    snapshot = replace(snapshot, pending=(replace(snapshot.pending[0], can_preempt=True),))
    plan = both_paths(snapshot)
    assert [p.victim_id for p in plan.preemptions] == [6]


@pytest.mark.parametrize("minimum", [4, 2])
def test_an_elastic_job_at_its_minimum_gives_nothing_back(minimum: int) -> None:
    running = [make_running(5).on("n0", 0, 1, 2, 3).elastic(minimum, 4).priority(5)]
    plan = run(make_snapshot([make_node("n0").gpus(4)], [make_job(1).gpus(3)], 0, running))
    assert plan.preemptions == []
    assert_pending(plan, 1)
