"""MIG jobs preempt, and are preempted, like any job: a victim gives its MIG device back."""

from __future__ import annotations

from typing import Any

from tests.unit.scheduler.builders import (
    assert_pending,
    make_job,
    make_node,
    make_running,
    make_snapshot,
)

from gpudock.config import SchedulerConfig
from gpudock.queue import QueuesConfig
from gpudock.scheduler.admission import QueuePolicy
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.post_filter import node_after
from gpudock.scheduler.registry import build_profile

H100 = "NVIDIA H100 80GB HBM3"


def victims(plan: Any) -> list[int]:
    return sorted(p.victim_id for p in plan.preemptions)


def both(snapshot: Any, config: SchedulerConfig | None = None) -> Any:
    """The accelerated cycle's Plan, once the reference cycle gave the same."""
    config = config or SchedulerConfig()
    profile, queues = build_profile(config), QueuePolicy.from_config(config.queues)
    fast, reference = (run_cycle(snapshot, profile, index=i, queues=queues) for i in (True, False))
    assert fast.preemptions == reference.preemptions
    assert fast.pending == reference.pending
    assert fast.placements == reference.placements
    return fast


def test_a_high_priority_mig_job_preempts_the_holder_of_the_only_device_of_its_profile() -> None:
    node = make_node("n0").gpus(1, model=H100).mig(0, "3g.40gb", "1g.10gb")
    running = [
        make_running(10).mig("n0", 0, 0).started(100),  # the only 3g.40gb
        make_running(11).mig("n0", 0, 1).started(900),  # younger, but the wrong profile
    ]
    urgent = make_job(20).mig("3g.40gb").priority(10)
    plan = both(make_snapshot([node], [urgent], now=1000, running=running))
    assert victims(plan) == [10]
    reason = plan.pending[20][0]
    assert reason.layer == "priority"
    assert reason.message == "preempting job 10 (priority 0) on node n0"


def test_never_on_a_node_its_filters_reject() -> None:
    nodes = [
        make_node("a").gpus(1, model=H100).mig(0, "3g.40gb").label("zone", "east"),
        make_node("b").gpus(1, model=H100).mig(0, "3g.40gb").label("zone", "west"),
    ]
    running = [
        make_running(10).mig("a", 0, 0).started(900),  # the cheaper victim, on a rejected node
        make_running(11).mig("b", 0, 0).started(100),
    ]
    urgent = make_job(20).mig("3g.40gb").priority(10).selector("zone", "west")
    plan = both(make_snapshot(nodes, [urgent], now=1000, running=running))
    assert victims(plan) == [11]
    alone = [make_running(10).mig("a", 0, 0).started(900)]
    plan = both(make_snapshot(nodes[:1], [urgent], now=1000, running=alone))
    assert plan.preemptions == []


def test_a_lower_or_equal_priority_mig_job_waits_for_a_device() -> None:
    node = make_node("n0").gpus(1, model=H100).mig(0, "3g.40gb")
    running = [make_running(10).mig("n0", 0, 0).priority(5).started(100)]
    plan = both(make_snapshot([node], [make_job(20).mig("3g.40gb").priority(5)], 1000, running))
    assert plan.preemptions == []
    assert_pending(plan, 20, exact="needs mig 3g.40gb; node n0 has no free MIG device")


def test_a_mig_victim_obeys_the_preemption_rules() -> None:
    node = make_node("n0").gpus(1, model=H100).mig(0, "3g.40gb")
    protected = [make_running(10).mig("n0", 0, 0).started(900).min_runtime(3600)]
    job = make_job(20).mig("3g.40gb").priority(10)
    plan = both(make_snapshot([node], [job], now=1000, running=protected))
    assert plan.preemptions == []
    held = [make_running(10).mig("n0", 0, 0).started(900).not_preemptible()]
    assert both(make_snapshot([node], [job], now=1000, running=held)).preemptions == []


def test_a_whole_gpu_job_never_preempts_a_mig_job_for_its_device() -> None:
    node = make_node("n0").gpus(1, model=H100).mig(0, "7g.80gb")
    running = [make_running(10).mig("n0", 0, 0).started(100)]
    plan = both(make_snapshot([node], [make_job(20).gpus(1).priority(10)], 1000, running))
    assert plan.preemptions == []


def test_a_queue_under_its_fair_share_reclaims_a_mig_device_from_a_borrower() -> None:
    node = make_node("n0").gpus(1, model=H100).mig(0, "3g.40gb", "3g.40gb")
    running = [make_running(10 + i).mig("n0", 0, i).queue("b").started(i) for i in range(2)]
    queues = [
        {"name": "a", "guarantee": {"gpus": 0.5}},
        {"name": "b", "guarantee": {"gpus": 0.25}},
    ]
    config = SchedulerConfig(queues=QueuesConfig.model_validate({"queues": queues}))
    plan = both(
        make_snapshot([node], [make_job(20).mig("3g.40gb").queue("a")], 100, running), config
    )
    assert victims(plan) == [11]
    assert plan.pending[20][0].layer == "fairness"


def test_the_node_after_a_mig_victim_left_has_its_device_free() -> None:
    view = make_snapshot(
        [make_node("n0").gpus(1, model=H100).mig(0, "3g.40gb", "1g.10gb")],
        [],
        running=[make_running(10).mig("n0", 0, 0), make_running(11).mig("n0", 0, 1)],
    )
    state = CycleState(view.nodes)
    after = node_after(state.nodes["n0"], [view.running[0]])
    assert [m.held for m in after.migs] == [False, True]
    assert [m.held for m in state.nodes["n0"].migs] == [True, True]  # untouched


def test_a_waiting_mig_preemptor_keeps_a_free_device_while_its_victims_stop() -> None:
    # its victim (a CPU holder) is still stopping; the device that is free now is held for it
    node = make_node("n0").gpus(1, model=H100).cpus(4, used=4).mig(0, "1g.10gb")
    running = [make_running(10).on("n0").cpus(4).stopping_for(20).started(0)]
    jobs = [make_job(20).mig("1g.10gb").cpus(4).priority(10), make_job(21).mig("1g.10gb")]
    plan = both(make_snapshot([node], jobs, now=1000, running=running))
    assert plan.placements == []
    assert_pending(plan, 21, layer="devices")
