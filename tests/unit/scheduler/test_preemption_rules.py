"""Preemption pays for itself (``preemption_rules.py``): protected time, restart cost, hysteresis.

Every rule holds for every reason to preempt (priority, reclaim, elastic shrink) and on
both the accelerated and the reference path (``both``).
"""

from __future__ import annotations

import math

import pytest
from tests.unit.scheduler.builders import (
    make_job,
    make_node,
    make_running,
    make_snapshot,
)

from gpudock.config import SchedulerConfig
from gpudock.queue.config import QueuesConfig
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.preemption_rules import PreemptionRules
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import Plan, Snapshot


def rules(**preemption: object) -> SchedulerConfig:
    return SchedulerConfig.model_validate({"preemption": preemption})


def both(snapshot: Snapshot, config: SchedulerConfig) -> Plan:
    """The accelerated path's Plan, checked equal to the reference path's."""
    profile = build_profile(config)
    queues = None
    if config.queues.queues:
        from gpudock.scheduler.admission import QueuePolicy

        queues = QueuePolicy.from_config(config.queues)
    fast = run_cycle(snapshot, profile, queues=queues)
    assert fast == run_cycle(snapshot, profile, index=False, queues=queues)
    return fast


def victims(plan: Plan) -> list[int]:
    return sorted(p.victim_id for p in plan.preemptions)


# ── rule 1: protected ───────────────────────────────────────────────────


def test_a_job_inside_its_protected_time_is_never_a_victim() -> None:
    """exempt_time 10m: the job that restarted 5 minutes ago is protected, the one that
    started 20 minutes ago is not, though it is older (a worse victim otherwise)."""
    running = [
        make_running(10).on("n0", 0).started(1000 - 1200),
        make_running(11).on("n0", 1).started(1000 - 300),
    ]
    urgent = make_job(20).gpus(1).priority(100)
    snapshot = make_snapshot([make_node("n0").gpus(2)], [urgent], now=1000, running=running)
    assert victims(both(snapshot, SchedulerConfig())) == [11]  # the youngest, unprotected
    assert victims(both(snapshot, rules(exempt_time="10m"))) == [10]
    young = make_running(11).on("n0", 0).started(1000 - 300)
    alone = make_snapshot([make_node("n0").gpus(1)], [urgent], now=1000, running=[young])
    plan = both(alone, rules(exempt_time="10m"))
    assert plan.preemptions == [] and 20 in plan.pending


def test_protection_scales_with_the_restart_cost() -> None:
    """exempt_restarts 10: a job that costs 60 s to restart runs 10 minutes first."""
    young = make_running(10).on("n0", 0).started(1000 - 500).restart_cost(60)
    snapshot = make_snapshot([make_node("n0").gpus(1)], [make_job(20).priority(9)], 1000, [young])
    assert both(snapshot, rules(exempt_restarts=10)).preemptions == []
    assert victims(both(snapshot, rules(exempt_restarts=5))) == [10]


def test_an_elastic_job_inside_its_protected_time_is_not_shrunk() -> None:
    elastic = make_running(10).on("n0", 0, 1, 2, 3).elastic(2, 4).started(1000 - 60)
    job = make_job(20).gpus(2)
    snapshot = make_snapshot([make_node("n0").gpus(4)], [job], now=1000, running=[elastic])
    assert victims(both(snapshot, SchedulerConfig())) == [10]
    assert both(snapshot, rules(exempt_time="5m")).preemptions == []


def test_a_borrower_inside_its_protected_time_is_not_reclaimed() -> None:
    queues = QueuesConfig.model_validate(
        {
            "cohorts": ["c"],
            "queues": [
                {"name": "a", "cohort": "c", "guarantee": {"gpus": 1}},
                {"name": "b", "cohort": "c", "guarantee": {"gpus": 1}},
            ],
        }
    )
    borrowers = [make_running(i).on("n0", i - 10).queue("b").started(1000 - 60) for i in (10, 11)]
    job = make_job(20).queue("a")
    snapshot = make_snapshot([make_node("n0").gpus(2)], [job], now=1000, running=borrowers)
    free = SchedulerConfig(queues=queues)
    assert victims(both(snapshot, free)) == [11]
    protected = free.model_copy(update={"preemption": rules(exempt_time="2m").preemption})
    plan = both(snapshot, protected)
    assert plan.preemptions == [] and 20 in plan.pending


# ── rule 2: a preemption pays for itself ────────────────────────────────


def test_a_preemption_whose_gain_is_below_the_victims_cost_is_not_made() -> None:
    """The victim ends in 40 s (its max_runtime), a restart costs it 60 s: waiting is
    cheaper, and the urgent job is told so; with 2 minutes left it is worth it."""
    ending = make_running(10).on("n0", 0).started(1000 - 3560).max_runtime(3600)
    urgent = make_job(20).priority(100)
    snapshot = make_snapshot([make_node("n0").gpus(1)], [urgent], now=1000, running=[ending])
    plan = both(snapshot, rules(restart_cost="1m"))
    assert plan.preemptions == []
    reason = plan.pending[20][0]
    assert (reason.layer, reason.message) == (
        "priority",
        "not preempting job 10 (priority 0) on node n0: a restart would cost 1m00s, "
        "more than the 40s it would gain",
    )
    later = make_running(10).on("n0", 0).started(1000 - 3480).max_runtime(3600)
    worth = make_snapshot([make_node("n0").gpus(1)], [urgent], now=1000, running=[later])
    made = both(worth, rules(restart_cost="1m")).preemptions
    assert [(p.victim_id, p.cost, p.gain) for p in made] == [(10, 60.0, 120.0)]


def test_the_cost_is_the_restart_plus_the_work_since_the_last_checkpoint() -> None:
    """Checkpoints every 10 minutes; 25 minutes in, 5 are lost: 30 s + 300 s charged."""
    victim = (
        make_running(10).on("n0", 0).started(1000 - 1500).restart_cost(30).checkpoint_interval(600)
    )
    snapshot = make_snapshot([make_node("n0").gpus(1)], [make_job(20).priority(5)], 1000, [victim])
    (made,) = both(snapshot, SchedulerConfig()).preemptions
    assert (made.cost, made.gain) == (330.0, None)  # its end unknown: the gain is unbounded


def test_a_measured_start_longer_than_the_cluster_default_is_charged() -> None:
    slow = make_running(10).on("n0", 0).started(0).start_seconds(240).ends_at(1200)
    snapshot = make_snapshot([make_node("n0").gpus(1)], [make_job(20).priority(5)], 1000, [slow])
    plan = both(snapshot, rules(restart_cost="1m"))  # gains 200 s, a restart costs 240 s
    assert plan.preemptions == []
    assert "a restart would cost 4m00s" in plan.pending[20][0].message


def test_the_preemptor_s_own_run_counts_against_the_gain() -> None:
    """With estimates: the victim ends in 1000 s. A preemptor expected to run 900 s would
    make it wait 900 s to save 1000 s: 100 s gained, less than the 2 minutes a restart
    costs; one expected to run 600 s gains 400 s."""
    victim = make_running(10).on("n0", 0).started(0).ends_at(2000)
    for remaining, made in ((900.0, False), (600.0, True)):
        job = make_job(20).priority(5).remaining(remaining)
        snapshot = make_snapshot([make_node("n0").gpus(1)], [job], now=1000, running=[victim])
        plan = both(snapshot, rules(restart_cost="2m", hysteresis=0))
        assert bool(plan.preemptions) is made, remaining


def test_an_elastic_shrink_that_does_not_pay_is_not_made() -> None:
    elastic = make_running(10).on("n0", 0, 1, 2, 3).elastic(2, 4).started(0).ends_at(1030)
    snapshot = make_snapshot([make_node("n0").gpus(4)], [make_job(20).gpus(2)], 1000, [elastic])
    assert both(snapshot, rules(restart_cost="1m")).preemptions == []
    assert victims(both(snapshot, rules(restart_cost="10s"))) == [10]


# ── rule 3: hysteresis ──────────────────────────────────────────────────


def swaps(config: SchedulerConfig, cycles: int = 200, step: float = 10.0) -> int:
    """Two jobs ranked by least attained service (the rank a remaining-time estimate with
    no history gives: a job that has run less is expected to end sooner), one GPU, a
    cycle every ``step`` seconds: how often they swap places. They start 1 s apart."""
    attained = {1: 100.0, 2: 99.0}
    on, off, started, now, count = 1, 2, 0.0, 0.0, 0
    for _ in range(cycles):
        now += step
        attained[on] += step
        held = (
            make_running(on)
            .on("n0", 0)
            .priority(-round(attained[on]))
            .started(started)
            .ends_at(now + attained[on])
        )
        waiting = make_job(off).priority(-round(attained[off])).remaining(attained[off])
        snapshot = make_snapshot([make_node("n0").gpus(1)], [waiting], now=now, running=[held])
        if both(snapshot, config).preemptions:
            on, off, started, count = off, on, now, count + 1
    return count


def test_two_jobs_of_nearly_equal_rank_do_not_swap_back_and_forth() -> None:
    """Free restarts and no rule: they take turns every other cycle. A restart cost of
    30 s and a hysteresis of 0.5 leave a handful of swaps in 2,000 s, each one only once
    the running job's rank is half as long again as the other's, plus the cost."""
    assert swaps(rules(restart_cost=0, hysteresis=0)) >= 90
    assert swaps(rules(restart_cost="30s", hysteresis=0.5)) <= 6


@pytest.mark.parametrize("spread", [0.0, 0.2, 0.3])
def test_ranks_within_the_hysteresis_never_swap(spread: float) -> None:
    """The pending job is expected to finish up to 30 % sooner than the running one:
    with a hysteresis of 0.5 (1.5 times sooner, a third) it never takes its place, even
    with free restarts."""
    runner = make_running(10).on("n0", 0).priority(0).started(0).ends_at(1000 + 1000)
    job = make_job(20).priority(10).remaining(1000 * (1 - spread))
    snapshot = make_snapshot([make_node("n0").gpus(1)], [job], now=1000, running=[runner])
    assert both(snapshot, rules(restart_cost=0, hysteresis=0.5)).preemptions == []
    assert victims(both(snapshot, rules(restart_cost=0, hysteresis=0))) == ([10] if spread else [])


# ── the rules themselves ────────────────────────────────────────────────


def test_the_rules_read_from_config() -> None:
    config = rules(restart_cost="2m", exempt_time="10m", hysteresis=0.25, exempt_restarts=3)
    assert build_profile(config).preemption == PreemptionRules(120.0, 600.0, 0.25, 3.0)
    assert build_profile(SchedulerConfig()).preemption == PreemptionRules(60.0, 0.0, 1.0, 0.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("restart_cost", -1, "must not be negative"),
        ("exempt_time", "soon", "expected a duration"),
        ("hysteresis", -0.5, "greater than or equal to 0"),
        ("exempt_restarts", "3", "valid number"),
        ("margin", 1, "Extra inputs are not permitted"),
    ],
)
def test_bad_preemption_settings_are_refused(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        rules(**{field: value})


def test_an_unknown_end_is_an_unbounded_gain() -> None:
    unknown = make_running(1).on("n0", 0).started(0).build()
    assert math.isinf(PreemptionRules().remaining(unknown, 100.0))
    bounded = make_running(1).on("n0", 0).started(0).max_runtime(300).ends_at(400).build()
    assert PreemptionRules().remaining(bounded, 100.0) == 200.0  # max_runtime caps it


def test_a_job_that_does_not_preempt_keeps_its_reservation_and_its_eta() -> None:
    """The victim ends in 40 s, less than a restart costs: the urgent job keeps the GPUs
    reserved for when it ends, and says both why it waits and when it starts."""
    ending = make_running(10).on("n0", 0).started(1000 - 3560).max_runtime(3600)
    urgent = make_job(20).priority(100)
    snapshot = make_snapshot([make_node("n0").gpus(1)], [urgent], now=1000, running=[ending])
    plan = both(snapshot, rules(restart_cost="1m"))
    assert [(r.job_id, r.node, r.start) for r in plan.reservations] == [(20, "n0", 1040.0)]
    first, *rest = plan.pending[20]
    assert first.message.startswith("not preempting job 10")
    assert any("expected to start" in (r.counterfactual or "") for r in rest)
