"""Who may preempt: only a preempting class, or a queue reclaiming its share; never a number."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.scheduler.builders import make_job, make_node, make_running, make_snapshot, run

from gpudock.config import SchedulerConfig
from gpudock.queue import QueuesConfig
from gpudock.scheduler.preemption import may_priority_preempt
from gpudock.scheduler.snapshot import JobRequest


def bobs_jobs_on_n0(gpus: int = 2) -> list[object]:
    return [make_running(10 + i).on("n0", i).user("bob").started(i) for i in range(gpus)]


def test_a_top_priority_without_a_preempting_class_never_evicts_another_users_job() -> None:
    alice = make_job(1).user("alice").priority(1_000_000).cannot_preempt()
    plan = run(
        make_snapshot([make_node("n0").gpus(2)], [alice], now=100, running=bobs_jobs_on_n0())
    )

    assert plan.preemptions == []
    assert plan.placements == []
    assert all(r.layer != "priority" for r in plan.pending[1]), plan.pending[1]


def test_the_same_job_with_a_preempting_class_evicts_the_youngest() -> None:
    alice = make_job(1).user("alice").priority(100)  # a preempting class: can_preempt
    plan = run(
        make_snapshot([make_node("n0").gpus(2)], [alice], now=100, running=bobs_jobs_on_n0())
    )

    assert [(p.victim_id, p.preemptor_id) for p in plan.preemptions] == [(11, 1)]
    assert plan.pending[1][0].layer == "priority"


def test_a_job_that_may_not_preempt_still_reclaims_its_queues_fair_share() -> None:
    queues = QueuesConfig.model_validate(
        {"queues": [{"name": "vision", "guarantee": {"gpus": 2}}, {"name": "nlp"}]}
    )
    running = [make_running(10 + i).on("n0", i).queue("nlp").started(i) for i in range(4)]
    job = make_job(1).queue("vision").cannot_preempt()
    plan = run(
        make_snapshot([make_node("n0").gpus(4)], [job], now=100, running=running),
        SchedulerConfig(queues=queues),
    )

    assert [(p.victim_id, p.preemptor_id) for p in plan.preemptions] == [(13, 1)]
    assert plan.pending[1][0].layer == "fairness"


def test_may_priority_preempt_needs_the_class_and_a_lower_candidate() -> None:
    def job(priority: int, can_preempt: bool) -> JobRequest:
        return JobRequest(1, 1, 0.0, priority=priority, queue="q", can_preempt=can_preempt)

    assert may_priority_preempt(job(5, True), {"q": 0})
    assert not may_priority_preempt(job(1_000_000, False), {"q": 0})
    assert not may_priority_preempt(job(0, True), {"q": 0})  # equal priority: no
    assert not may_priority_preempt(job(5, True), {"other": 0})  # nothing in its queue


@settings(max_examples=60, deadline=None)
@given(
    running=st.lists(st.integers(-100, 100), min_size=1, max_size=4),
    pending=st.lists(st.integers(-1_000_000, 1_000_000), min_size=1, max_size=4),
)
def test_without_preempting_classes_no_priority_preempts_anything(
    running: list[int], pending: list[int]
) -> None:
    """One queue, no queues declared: only the priority kind could preempt, and it may not."""
    holders = [
        make_running(100 + i).on("n0", i).priority(p).user("bob").started(i)
        for i, p in enumerate(running)
    ]
    jobs = [
        make_job(1 + i).user("alice").priority(p).submitted(i).cannot_preempt()
        for i, p in enumerate(pending)
    ]
    plan = run(make_snapshot([make_node("n0").gpus(4)], jobs, now=1000, running=holders))
    assert plan.preemptions == []
