"""Preemption within a queue: who is stopped, where, and what the preemptor is told."""

from __future__ import annotations

from tests.unit.scheduler.builders import (
    make_job,
    make_node,
    make_running,
    make_snapshot,
    placement_of,
    run,
)


def victims(plan: object) -> list[int]:
    return sorted(p.victim_id for p in plan.preemptions)  # type: ignore[attr-defined]


def test_a_higher_priority_job_preempts_the_youngest_lower_priority_jobs() -> None:
    running = [
        make_running(10).on("n0", 0).started(100),
        make_running(11).on("n0", 1).started(200),
        make_running(12).on("n0", 2).started(300),
        make_running(13).on("n0", 3).started(400),
    ]
    urgent = make_job(20).gpus(2).priority(100)
    plan = run(make_snapshot([make_node("n0").gpus(4)], [urgent], now=1000, running=running))
    assert victims(plan) == [12, 13]
    assert placement_of(plan, 20) is None
    reason = plan.pending[20][0]
    assert reason.layer == "priority"
    assert reason.message == "preempting jobs 12, 13 (priority 0) on node n0"
    assert {p.reason for p in plan.preemptions} == {"job 20 (priority 100)"}


def test_lowest_priority_goes_first_then_the_youngest() -> None:
    running = [
        make_running(10).on("n0", 0).priority(5).started(900),
        make_running(11).on("n0", 1).priority(1).started(100),
    ]
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(2)], [make_job(20).priority(10)], now=1000, running=running
        )
    )
    assert victims(plan) == [11]


def test_only_what_is_needed_and_on_the_cheapest_node() -> None:
    running = [
        make_running(10).on("a", 0, 1).started(0),  # 2 GPUs, ran 1000s
        make_running(11).on("b", 0).started(900),  # 1 GPU each, young
        make_running(12).on("b", 1).started(950),
    ]
    nodes = [make_node("a").gpus(2), make_node("b").gpus(2)]
    plan = run(make_snapshot(nodes, [make_job(20).gpus(1).priority(9)], now=1000, running=running))
    assert victims(plan) == [12]  # one young victim on b beats a two-GPU job on a


def test_protected_jobs_are_never_victims() -> None:
    running = [
        make_running(10).on("n0", 0).not_preemptible(),
        make_running(11).on("n0", 1).min_runtime(3600).started(900),
        make_running(12).on("n0", 2).queue("other"),
        make_running(13).on("n0", 3).priority(50),
    ]
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(4)], [make_job(20).priority(50)], now=1000, running=running
        )
    )
    assert plan.preemptions == []
    assert plan.pending[20][0].layer == "devices"


def test_a_job_whose_class_may_not_preempt_just_waits() -> None:
    running = [make_running(10).on("n0", 0)]
    job = make_job(20).priority(100).cannot_preempt()
    plan = run(make_snapshot([make_node("n0").gpus(1)], [job], now=10, running=running))
    assert plan.preemptions == []


def test_a_preemptor_waits_for_its_victims_instead_of_choosing_more() -> None:
    running = [
        make_running(10).on("n0", 0).stopping_for(20),
        make_running(11).on("n0", 1),
    ]
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(2)], [make_job(20).priority(9)], now=10, running=running
        )
    )
    assert plan.preemptions == []
    assert plan.pending[20][0].message == "waiting for preempted job 10 (priority 0) to stop"


def test_two_preemptors_never_pick_the_same_victim() -> None:
    running = [make_running(10).on("n0", 0), make_running(11).on("n0", 1)]
    jobs = [make_job(20).priority(9), make_job(21).priority(8)]
    plan = run(make_snapshot([make_node("n0").gpus(2)], jobs, now=10, running=running))
    by_preemptor = {p.preemptor_id: p.victim_id for p in plan.preemptions}
    assert len(by_preemptor) == 2 and len(set(by_preemptor.values())) == 2


def test_shared_victims_free_memory_not_whole_gpus() -> None:
    running = [
        make_running(10).on("n0", 0).share("40GiB"),
        make_running(11).on("n0", 0).share("30GiB"),
    ]
    job = make_job(20).gpu_memory("35GiB").priority(5)
    plan = run(make_snapshot([make_node("n0").gpus(1)], [job], now=10, running=running))
    assert victims(plan) == [11]  # freeing 30GiB leaves 40GiB free: enough for 35GiB


def test_a_gang_is_never_split_onto_one_node() -> None:
    """Two parts of 4 GPUs would fit on node a alone; the gang still takes both nodes."""
    nodes = [make_node("a").gpus(8), make_node("b").gpus(8)]
    plan = run(make_snapshot(nodes, [make_job(1).gpus(4).nodes(2)]))
    assert plan.placements == [] and len(plan.gangs) == 1
    assert sorted(p.node for p in plan.gangs[0].parts) == ["a", "b"]


def test_gpus_freed_by_a_victim_are_kept_for_the_preemptor() -> None:
    """Victim 10 already stopped (GPU 0 is free); victim 11 is still stopping."""
    running = [make_running(11).on("n0", 1).stopping_for(20)]
    jobs = [make_job(20).gpus(2).priority(9), make_job(10).gpus(1).submitted(0)]
    plan = run(make_snapshot([make_node("n0").gpus(2)], jobs, now=10, running=running))
    assert placement_of(plan, 10) is None, "the requeued victim must not take the freed GPU"
    assert plan.preemptions == []
