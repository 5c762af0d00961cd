"""A queue's ``max_running_gpus_per_user``: the per-user admission step of the cycle."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from tests.unit.scheduler.builders import make_job, make_node, make_running, make_snapshot, run

from gpudock.config import SchedulerConfig
from gpudock.queue import QueuesConfig
from gpudock.queue.user_limits import UserLimits


def config(*queues: dict[str, Any]) -> SchedulerConfig:
    return SchedulerConfig(queues=QueuesConfig.model_validate({"queues": list(queues)}))


def test_a_job_over_its_users_running_limit_waits_with_a_quota_reason_naming_it() -> None:
    running = [make_running(50).on("n0", 0, 1).queue("vision").user("alice")]
    jobs = [make_job(1).queue("vision").user("alice"), make_job(2).queue("vision").user("bob")]
    cfg = config({"name": "vision", "max_running_gpus_per_user": 2})
    plan = run(make_snapshot([make_node("n0").gpus(8)], jobs, running=running), cfg)
    assert [p.job_id for p in plan.placements] == [2]
    (reason,) = plan.pending[1]
    assert reason.layer == "quota"
    assert reason.message == (
        "user alice holds 2 GPUs in queue vision; its max_running_gpus_per_user is 2 (job needs 1)"
    )
    assert reason.counterfactual == "runs once user alice's jobs in queue vision hold at most 1"


def test_jobs_placed_in_the_same_cycle_count_towards_the_limit() -> None:
    jobs = [make_job(i).queue("vision").user("alice").gpus(2).submitted(i) for i in (1, 2, 3)]
    cfg = config({"name": "vision", "max_running_gpus_per_user": 4})
    plan = run(make_snapshot([make_node("n0").gpus(8)], jobs), cfg)
    assert sorted(p.job_id for p in plan.placements) == [1, 2]
    assert plan.pending[3][0].layer == "quota"


def test_the_limit_is_per_queue_and_other_queues_are_unaffected() -> None:
    running = [make_running(50).on("n0", 0, 1).queue("vision").user("alice")]
    jobs = [make_job(1).queue("nlp").user("alice").gpus(2)]
    cfg = config({"name": "vision", "max_running_gpus_per_user": 2}, {"name": "nlp"})
    plan = run(make_snapshot([make_node("n0").gpus(8)], jobs, running=running), cfg)
    assert [p.job_id for p in plan.placements] == [1]


def test_a_job_larger_than_the_limit_is_told_to_ask_for_fewer() -> None:
    cfg = config({"name": "vision", "max_running_gpus_per_user": 2})
    plan = run(make_snapshot([make_node("n0").gpus(8)], [make_job(1).queue("vision").gpus(3)]), cfg)
    (reason,) = plan.pending[1]
    assert reason.counterfactual is not None and "ask for fewer GPUs" in reason.counterfactual


def test_a_job_over_the_user_limit_never_preempts() -> None:
    running = [
        make_running(50).on("n0", 0).queue("vision").user("alice"),
        make_running(51).on("n0", 1).queue("other").user("bob").priority(-5),
    ]
    cfg = config(
        {"name": "vision", "max_running_gpus_per_user": 1, "guarantee": {"gpus": 2}},
        {"name": "other"},
    )
    job = make_job(1).queue("vision").user("alice").priority(100)
    plan = run(make_snapshot([make_node("n0").gpus(2)], [job], running=running), cfg)
    assert plan.preemptions == []
    assert plan.pending[1][0].message.startswith("user alice holds 1 GPU")


def test_shared_gpus_count_as_fractions() -> None:
    limits = UserLimits({"q": Fraction(1, 2)}, {("q", "alice"): Fraction(1, 4)})
    assert limits.refuse("q", "alice", Fraction(1, 4)) is None
    limits.charge("q", "alice", Fraction(1, 4))
    assert limits.refuse("q", "alice", Fraction(1, 4)) is not None
    assert limits.refuse("q", "bob", Fraction(1, 2)) is None


def test_no_queue_with_the_setting_means_no_step() -> None:
    assert UserLimits.of(QueuesConfig.model_validate({"queues": [{"name": "a"}]}), dict) is None
