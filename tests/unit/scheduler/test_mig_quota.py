"""MIG jobs count against quotas, per-user caps and fair share: their compute sevenths of a GPU."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from tests.unit.scheduler.builders import (
    assert_pending,
    assert_placed,
    make_job,
    make_node,
    make_running,
    make_snapshot,
    run,
)

from gpudock.config import SchedulerConfig
from gpudock.core.mig import MIG_MODELS, compute_slices
from gpudock.core.units import parse_size
from gpudock.queue import QueuesConfig, Resources
from gpudock.scheduler.admission import (
    QueueAdmission,
    QueuePolicy,
    never_admitted_on,
    queue_usage,
    usable_capacity,
    user_usage,
)
from gpudock.services.queues import queue_report

H100 = "NVIDIA H100 80GB HBM3"
GB = parse_size("1GB")  # the builders' device sizes


def config(*queues: dict[str, Any]) -> SchedulerConfig:
    return SchedulerConfig(queues=QueuesConfig.model_validate({"queues": list(queues)}))


def mig_node(name: str = "n0") -> Any:
    """One H100 in MIG mode cut into 3g.40gb, 3g.40gb and 1g.10gb, and one whole H100."""
    return make_node(name).gpus(2, model=H100).mig(0, "3g.40gb", "3g.40gb", "1g.10gb")


def test_the_compute_slices_of_a_profile_are_the_tables() -> None:
    for model in MIG_MODELS:
        for profile in model.profiles:
            assert compute_slices(profile.name) == profile.compute


def test_a_running_mig_job_counts_its_compute_sevenths_and_its_devices_memory() -> None:
    running = [
        make_running(50).mig("n0", 0, 0).queue("a"),
        make_running(51).mig("n0", 0, 2).queue("a").user("bob"),
    ]
    snapshot = make_snapshot([mig_node()], [], running=running)
    usage = queue_usage(snapshot)["a"]
    assert usage == Resources(Fraction(4, 7), 40 * GB + 10 * GB, 0)
    assert user_usage(snapshot)[("a", "bob")] == Fraction(1, 7)


def test_a_gpu_in_mig_mode_counts_in_capacity() -> None:
    snapshot = make_snapshot([mig_node()], [])
    assert usable_capacity(snapshot).gpus == 2


def test_a_mig_job_over_its_queues_limit_waits_with_the_quota_reason() -> None:
    running = [make_running(50).mig("n0", 0, 0).queue("q")]
    jobs = [make_job(1).mig("3g.40gb").queue("q")]
    plan = run(make_snapshot([mig_node()], jobs, running=running), config(LIMITED))
    (reason,) = plan.pending[1]
    assert reason.layer == "quota"
    assert "would exceed its limit" in reason.message


LIMITED = {"name": "q", "limit": {"gpus": 0.5}}


def test_mig_jobs_placed_in_one_cycle_count_against_the_limit() -> None:
    jobs = [make_job(i).mig("3g.40gb").queue("q").submitted(i) for i in (1, 2)]
    plan = run(make_snapshot([mig_node()], jobs), config(LIMITED))
    assert assert_placed(plan, 1).mig == "MIG-n0-0-0"
    assert_pending(plan, 2, layer="quota")


def test_small_mig_jobs_fit_where_a_large_one_does_not() -> None:
    running = [make_running(50).mig("n0", 0, 0).queue("q")]  # 3/7 of 0.5
    jobs = [make_job(1).mig("1g.10gb").queue("q")]  # 4/7 > 0.5
    plan = run(make_snapshot([mig_node()], jobs, running=running), config(LIMITED))
    assert_pending(plan, 1, layer="quota")
    roomy = {"name": "q", "limit": {"gpus": Fraction(4, 7) + Fraction(1, 1000)}}
    plan = run(make_snapshot([mig_node()], jobs, running=running), config(roomy))
    assert assert_placed(plan, 1).mig == "MIG-n0-0-2"


def test_a_users_mig_jobs_count_against_the_per_user_cap() -> None:
    running = [make_running(50).mig("n0", 0, 0).queue("q").user("alice")]
    jobs = [make_job(1).mig("3g.40gb").queue("q").user("alice")]
    jobs += [make_job(2).mig("3g.40gb").queue("q").user("bob")]
    cfg = config({"name": "q", "max_running_gpus_per_user": 0.5})
    plan = run(make_snapshot([mig_node()], jobs, running=running), cfg)
    assert assert_placed(plan, 2).mig == "MIG-n0-0-1"
    (reason,) = plan.pending[1]
    assert reason.layer == "quota"
    assert reason.message == (
        "user alice holds 0.43 GPUs in queue q; its max_running_gpus_per_user is 0.5 "
        "(job needs 0.43)"
    )


def test_fair_share_orders_by_mig_usage() -> None:
    # queue a holds two thirds of the MIG GPU's compute; b holds nothing: b goes first
    running = [make_running(50).mig("n0", 0, 0).queue("a")]
    jobs = [make_job(1).mig("3g.40gb").queue("a"), make_job(2).mig("3g.40gb").queue("b")]
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(1, model=H100).mig(0, "3g.40gb", "3g.40gb")],
            jobs,
            running=running,
        ),
        config({"name": "a"}, {"name": "b"}),
    )
    assert assert_placed(plan, 2).mig == "MIG-n0-0-1"
    assert_pending(plan, 1, layer="devices")


def test_the_queue_report_shows_mig_usage_and_demand() -> None:
    running = [make_running(50).mig("n0", 0, 0).queue("q")]
    jobs = [make_job(1).mig("1g.10gb").queue("q")]
    snapshot = make_snapshot([mig_node()], jobs, running=running)
    report = queue_report(snapshot, config(LIMITED).queues, None).to_dict()
    (q,) = [r for r in report["queues"] if r["name"] == "q"]
    assert q["usage"]["gpus"] == round(3 / 7, 4)
    assert report["capacity"]["gpus"] == 2  # the GPU in MIG mode counts
    assert q["fair_share"]["gpus"] == 0.5  # its demand, 4/7 with the pending job, capped


def test_a_pending_mig_job_is_charged_no_less_than_once_placed() -> None:
    snapshot = make_snapshot([mig_node()], [make_job(1).mig("3g.40gb").queue("q")])
    admission = QueueAdmission(QueuePolicy.build(config(LIMITED).queues), snapshot)
    assert admission.estimate(snapshot.pending[0]) == Resources(Fraction(3, 7), 40 * GB, 0)


def test_a_mig_job_larger_than_its_queues_limit_is_never_admitted() -> None:
    job = make_job(1).mig("3g.40gb").queue("q").build()
    cfg = config({"name": "q", "limit": {"gpus": 0.25}}).queues
    refusal = never_admitted_on(cfg, job, (mig_node().build(),))
    assert refusal is not None
    assert (
        never_admitted_on(cfg, make_job(2).mig("1g.10gb").queue("q").build(), (mig_node().build(),))
        is None
    )
