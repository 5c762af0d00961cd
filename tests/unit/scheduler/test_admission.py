"""Queues in the cycle: fair-share order across queues, quota admission, exact usage."""

from __future__ import annotations

from typing import Any

from tests.unit.scheduler.builders import (
    gpu_uuid,
    make_job,
    make_node,
    make_running,
    make_snapshot,
    run,
)

from gpudock.config import SchedulerConfig
from gpudock.queue import QueuesConfig
from gpudock.scheduler.admission import QueueAdmission, QueuePolicy
from gpudock.scheduler.snapshot import Placement


def config(*queues: dict[str, Any], cohorts: tuple[str, ...] = ()) -> SchedulerConfig:
    return SchedulerConfig(
        queues=QueuesConfig.model_validate({"cohorts": list(cohorts), "queues": list(queues)})
    )


def placed_by_queue(plan: Any, jobs: dict[int, str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for p in plan.placements:
        counts[jobs[p.job_id]] = counts.get(jobs[p.job_id], 0) + 1
    return counts


def test_equal_weights_split_the_cluster_whatever_the_submit_order() -> None:
    # queue a submitted everything first; fair share still gives b half
    jobs = [make_job(i).queue("a").submitted(i) for i in range(1, 7)]
    jobs += [make_job(i).queue("b").submitted(i) for i in range(7, 13)]
    cfg = config({"name": "a"}, {"name": "b"})
    plan = run(make_snapshot([make_node("n0").gpus(4)], jobs), cfg)
    queue_of = {j.build().id: j.build().queue for j in jobs}
    assert placed_by_queue(plan, queue_of) == {"a": 2, "b": 2}


def test_weights_divide_the_cluster() -> None:
    jobs = [make_job(i).queue("a").submitted(i) for i in range(1, 10)]
    jobs += [make_job(i).queue("b").submitted(i) for i in range(10, 19)]
    cfg = config({"name": "a", "weight": 2}, {"name": "b"})
    plan = run(make_snapshot([make_node("n0").gpus(6)], jobs), cfg)
    queue_of = {j.build().id: j.build().queue for j in jobs}
    assert placed_by_queue(plan, queue_of) == {"a": 4, "b": 2}


def test_running_jobs_count_against_their_queue() -> None:
    running = [make_running(50).on("n0", 0, 1).queue("a")]
    jobs = [make_job(1).queue("a"), make_job(2).queue("b")]
    cfg = config({"name": "a"}, {"name": "b"})
    plan = run(make_snapshot([make_node("n0").gpus(3)], jobs, running=running), cfg)
    assert [p.job_id for p in plan.placements] == [2]


def test_a_queue_at_its_quota_without_borrowing_waits_with_a_quota_reason() -> None:
    running = [make_running(50).on("n0", 0, 1).queue("nlp")]
    cfg = config({"name": "nlp", "guarantee": {"gpus": 2}, "borrow": False})
    plan = run(
        make_snapshot([make_node("n0").gpus(8)], [make_job(1).queue("nlp")], running=running), cfg
    )
    (reason,) = plan.pending[1]
    assert reason.layer == "quota"
    assert reason.message == "queue nlp at quota 2/2 GPUs; borrowing disabled"


def test_a_queue_never_exceeds_its_limit() -> None:
    jobs = [make_job(i).queue("vision").gpus(2) for i in range(1, 4)]
    cfg = config({"name": "vision", "limit": {"gpus": 4}})
    plan = run(make_snapshot([make_node("n0").gpus(8)], jobs), cfg)
    assert len(plan.placements) == 2
    (reason,) = plan.pending[3]
    assert reason.layer == "quota" and "would exceed its limit" in reason.message


def test_shared_jobs_count_their_fraction_of_a_gpu() -> None:
    # four 20GiB shares of an 80GiB GPU are one GPU of a 1-GPU guarantee
    jobs = [make_job(i).queue("q").gpu_memory("20GiB") for i in range(1, 6)]
    cfg = config({"name": "q", "guarantee": {"gpus": 1}, "borrow": False})
    plan = run(make_snapshot([make_node("n0").gpus(2)], jobs), cfg)
    assert len(plan.placements) == 4
    assert plan.pending[5][0].layer == "quota"


def test_no_declared_queues_means_no_admission_step() -> None:
    jobs = [make_job(i).queue("anything") for i in range(1, 4)]
    plan = run(make_snapshot([make_node("n0").gpus(2)], jobs))
    assert [p.job_id for p in plan.placements] == [1, 2]
    assert plan.pending[3][0].layer == "devices"


TWO_QUEUES = (
    {"name": "vision", "guarantee": {"gpus": 2}},
    {"name": "nlp", "guarantee": {"gpus": 2}},
)


def test_a_queue_under_its_fair_share_reclaims_from_a_borrower() -> None:
    running = [make_running(10 + i).on("n0", i).queue("nlp").started(i) for i in range(4)]
    job = make_job(1).queue("vision")
    plan = run(
        make_snapshot([make_node("n0").gpus(4)], [job], now=100, running=running),
        config(*TWO_QUEUES),
    )
    assert [(p.victim_id, p.preemptor_id) for p in plan.preemptions] == [(13, 1)]
    reason = plan.pending[1][0]
    assert reason.layer == "fairness"
    assert reason.message == (
        "queue vision is under its fair share: reclaiming job 13 (priority 0) "
        "from borrowing queue nlp on node n0"
    )


def test_no_reclaim_from_a_queue_within_its_guarantee() -> None:
    running = [
        make_running(10).on("n0", 0).queue("nlp"),
        make_running(11).on("n0", 1).queue("nlp"),
        make_running(12).on("n0", 2).queue("vision"),
        make_running(13).on("n0", 3).queue("vision"),
    ]
    plan = run(
        make_snapshot([make_node("n0").gpus(4)], [make_job(1).queue("vision")], running=running),
        config(*TWO_QUEUES),
    )
    assert plan.preemptions == []


def test_reclaim_stops_at_the_fair_share_not_only_the_guarantee() -> None:
    # vision already holds its 2-GPU guarantee; weights 3:1 make its fair share 3 of 4
    queues = (
        {"name": "vision", "weight": 3, "guarantee": {"gpus": 2}},
        {"name": "nlp", "guarantee": {"gpus": 1}},
    )
    running = [
        make_running(10).on("n0", 0).queue("vision"),
        make_running(11).on("n0", 1).queue("vision"),
        make_running(12).on("n0", 2).queue("nlp").started(5),
        make_running(13).on("n0", 3).queue("nlp").started(6),
    ]
    jobs = [make_job(1).queue("vision"), make_job(2).queue("vision")]
    plan = run(
        make_snapshot([make_node("n0").gpus(4)], jobs, now=100, running=running), config(*queues)
    )
    assert [(p.victim_id, p.preemptor_id) for p in plan.preemptions] == [(13, 1)]
    assert plan.pending[2][0].layer != "fairness"  # a fourth GPU would exceed the fair share


def test_a_reclaim_answer_follows_what_the_cycle_charged() -> None:
    # vision (fair share 6 of 8) holds 1 GPU; nlp borrows the other 3 of n0; n1 is free
    queues = (
        {"name": "vision", "weight": 3, "guarantee": {"gpus": 2}},
        {"name": "nlp", "guarantee": {"gpus": 1}},
    )
    running = [
        make_running(10).on("n0", 0).queue("vision"),
        make_running(11).on("n0", 1, 2, 3).queue("nlp"),
    ]
    pending = [make_job(i).queue("vision").gpus(2).build() for i in (1, 2, 3)]
    nodes = [make_node("n0").gpus(4), make_node("n1").gpus(4)]
    snapshot = make_snapshot(nodes, pending, running=running)
    admission = QueueAdmission(QueuePolicy.build(config(*queues).queues), snapshot)
    rule = admission.reclaim_rule(pending[0])
    assert rule is not None and rule(running[1].build()) and not rule(running[0].build())
    admission.charge(pending[1], Placement(2, "n1", (gpu_uuid("n1", 0), gpu_uuid("n1", 1))))
    admission.charge(pending[2], Placement(3, "n1", (gpu_uuid("n1", 2), gpu_uuid("n1", 3))))
    assert admission.reclaim_rule(pending[0]) is None  # 5 + 2 GPUs would pass the share of 6


def test_a_grant_counts_against_the_next_reclaim_of_the_same_shape() -> None:
    queues = (
        {"name": "vision", "weight": 3, "guarantee": {"gpus": 1}},
        {"name": "nlp", "guarantee": {"gpus": 1}},
    )
    running = [make_running(11).on("n0", 0, 1, 2, 3).queue("nlp")]
    pending = [make_job(i).queue("vision").gpus(2).build() for i in (1, 2)]
    snapshot = make_snapshot([make_node("n0").gpus(4)], pending, running=running)
    admission = QueueAdmission(QueuePolicy.build(config(*queues).queues), snapshot)
    assert admission.reclaim_rule(pending[0]) is not None  # 2 of a fair share of 3
    admission.granted(pending[0])
    assert admission.reclaim_rule(pending[1]) is None  # 2 promised + 2 would pass it


def test_a_cpu_limit_without_a_guarantee_borrows_the_nodes_cores() -> None:
    """CPU quotas lend from the cores the nodes offer: a queue limited to 4 CPUs with no
    CPU guarantee admits 4 one-CPU jobs, not none."""
    jobs = [make_job(i).queue("vision").gpus(0).cpus(1) for i in range(1, 7)]
    cfg = config({"name": "vision", "limit": {"cpus": 4}})
    plan = run(make_snapshot([make_node("n0").gpus(4).cpus(8)], jobs), cfg)

    assert len(plan.placements) == 4
    assert {r[0].message for r in plan.pending.values()} == {
        "queue vision would exceed its limit (4/4 CPUs in use, job needs 1)"
    }
