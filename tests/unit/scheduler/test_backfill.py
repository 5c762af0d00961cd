"""EASY backfill: the first blocked job's reservation, its ETA, and who may use its GPUs."""

from __future__ import annotations

from tests.unit.scheduler.builders import (
    gpu_indices,
    make_job,
    make_node,
    make_running,
    make_snapshot,
    placement_of,
    run,
)

from gpudock.config import SchedulerConfig
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import ReservedGpus

NOW = 1000.0


def cluster(*running: object) -> dict[str, object]:
    return {"nodes": [make_node("n0").gpus(4)], "running": running, "now": NOW}


def test_the_blocked_job_gets_an_eta_and_a_short_job_backfills_in_its_shadow() -> None:
    running = [
        make_running(10).on("n0", 0, 1).started(0).max_runtime(3600),  # ends at 3600
        make_running(11).on("n0", 2),  # no max_runtime
    ]
    big = make_job(1).gpus(3).priority(10).cannot_preempt()  # it waits: EASY reserves
    short = make_job(2).max_runtime(600).submitted(1)  # ends at 1600 < 3600
    plan = run(make_snapshot([make_node("n0").gpus(4)], [big, short], now=NOW, running=running))
    placed = placement_of(plan, 2)
    assert placed is not None and gpu_indices(placed) == [3]
    eta = plan.pending[1][-1]
    assert eta.message == "next in line: GPUs 0-1, 3 of n0 are reserved for it"
    assert eta.counterfactual == (
        "expected to start ≈ 01:00, in 43m20s, when job 10 reaches max_runtime"
    )


def test_a_job_without_max_runtime_may_not_take_reserved_gpus() -> None:
    running = [make_running(10).on("n0", 0, 1).started(0).max_runtime(3600)]
    big = make_job(1).gpus(4).priority(10)
    unbounded = make_job(2).submitted(1)
    plan = run(make_snapshot([make_node("n0").gpus(4)], [big, unbounded], now=NOW, running=running))
    assert placement_of(plan, 2) is None
    reason = plan.pending[2][0]
    assert reason.layer == "priority"
    assert reason.message == "GPUs 2-3 of n0 are reserved for job 1 (expected to start ≈ 01:00)"
    assert reason.counterfactual == "with max_runtime at most 43m20s it could backfill now"


def test_a_long_job_may_not_take_reserved_gpus_either() -> None:
    running = [make_running(10).on("n0", 0, 1).started(0).max_runtime(3600)]
    big = make_job(1).gpus(4).priority(10)
    long = make_job(2).max_runtime(7200).submitted(1)  # would end after 3600
    plan = run(make_snapshot([make_node("n0").gpus(4)], [big, long], now=NOW, running=running))
    assert placement_of(plan, 2) is None


def test_gpus_the_blocked_job_cannot_use_stay_free_for_others() -> None:
    # the 3-GPU job only needs busy GPUs 0-2 plus one free one; GPU 3 is reserved, 4-7 are not
    running = [make_running(10).on("n0", 0, 1, 2).started(0).max_runtime(3600)]
    nodes = [make_node("n0").gpus(8)]
    big = make_job(1).gpus(8).priority(10)
    other = make_job(2).gpus(1).submitted(1)
    plan = run(make_snapshot(nodes, [big, other], now=NOW, running=running))
    # the reservation needs every GPU: nothing is left to backfill without max_runtime
    assert placement_of(plan, 2) is None
    small_big = make_job(1).gpus(4).priority(10)
    plan = run(make_snapshot(nodes, [small_big, other], now=NOW, running=running))
    assert placement_of(plan, 1) is not None  # 5 free GPUs: it simply runs


def test_a_reserved_job_that_may_preempt_preempts_instead_of_waiting() -> None:
    """Its own reservation holds the free GPUs for it, never against it: it preempts."""
    running = [make_running(10).on("n0", 0, 1).started(0).max_runtime(3600)]
    big = make_job(1).gpus(4).priority(10)
    plan = run(make_snapshot([make_node("n0").gpus(4)], [big], now=NOW, running=running))
    assert [(p.victim_id, p.preemptor_id) for p in plan.preemptions] == [(10, 1)]
    assert plan.pending[1][0].layer == "priority"
    assert not any("next in line" in r.message for r in plan.pending[1])


def test_unknown_start_when_running_jobs_have_no_max_runtime() -> None:
    running = [make_running(10).on("n0", 0, 1)]
    big = make_job(1).gpus(4).priority(10).cannot_preempt()
    plan = run(make_snapshot([make_node("n0").gpus(4)], [big], now=NOW, running=running))
    assert plan.pending[1][-1].counterfactual == (
        "expected to start when running jobs end (the running jobs it waits for have no"
        " max_runtime)"
    )


# the words of a reservation (issue 29: "0B free" on GPUs that were idle but reserved)


def test_a_blocked_job_is_told_which_gpus_are_reserved_for_whom_and_until_when() -> None:
    """GPUs 0-1 run job 10 until 3600 (01:00 UTC); 2-5 are idle but held for job 17."""
    running = [make_running(10).on("n0", 0, 1).started(0).max_runtime(3600)]
    big = make_job(17).gpus(6).priority(10).cannot_preempt()
    small = make_job(18).gpus(2).submitted(1)
    plan = run(make_snapshot([make_node("n0").gpus(6)], [big, small], now=NOW, running=running))
    reason = plan.pending[18][0]
    assert (reason.layer, reason.message) == (
        "priority",
        "GPUs 2-5 of n0 are reserved for job 17 (expected to start ≈ 01:00)",
    )
    assert plan.pending[17][-1].message == "next in line: GPUs 0-5 of n0 are reserved for it"


def test_a_blocked_job_is_told_the_start_is_unknown_when_no_running_job_has_max_runtime() -> None:
    running = [make_running(10).on("n0", 0, 1)]
    big = make_job(17).gpus(4).priority(10).cannot_preempt()
    small = make_job(18).submitted(1)
    plan = run(make_snapshot([make_node("n0").gpus(4)], [big, small], now=NOW, running=running))
    reason = plan.pending[18][0]
    assert reason.message == (
        "GPUs 2-3 of n0 are reserved for job 17 (expected to start when running jobs end)"
    )
    assert reason.counterfactual == (
        "the reserved job's start is unknown, so no backfill onto its GPUs"
    )


def test_a_shared_job_is_told_the_idle_gpus_are_reserved_not_that_they_have_0b_free() -> None:
    running = [make_running(10).on("n0", 0, 1).started(0).max_runtime(3600)]
    big = make_job(17).gpus(4).priority(10).cannot_preempt()
    shared = make_job(18).gpus(1).gpu_memory("4GiB").submitted(1)
    plan = run(make_snapshot([make_node("n0").gpus(4)], [big, shared], now=NOW, running=running))
    assert placement_of(plan, 18) is None
    assert plan.pending[18][0].message == (
        "GPUs 2-3 of n0 are reserved for job 17 (expected to start ≈ 01:00)"
    )


def test_the_eta_gives_the_date_when_it_is_not_today() -> None:
    running = [make_running(10).on("n0", 0, 1).started(0).max_runtime(3 * 86400)]
    big = make_job(17).gpus(4).priority(10).cannot_preempt()
    plan = run(make_snapshot([make_node("n0").gpus(4)], [big], now=NOW, running=running))
    assert plan.pending[17][-1].counterfactual == (
        "expected to start ≈ Jan 04 00:00, in 2d23h, when job 10 reaches max_runtime"
    )


def test_the_plan_lists_the_reservation_for_the_gpus_api() -> None:
    running = [make_running(10).on("n0", 0, 1).started(0).max_runtime(3600)]
    big = make_job(17).gpus(4).priority(10).cannot_preempt().user("alice")
    plan = run(make_snapshot([make_node("n0").gpus(4)], [big], now=NOW, running=running))
    assert plan.reservations == [ReservedGpus(17, "alice", "n0", (0, 1, 2, 3), 3600.0)]


def test_a_reserved_job_that_preempts_publishes_no_reservation() -> None:
    running = [make_running(10).on("n0", 0, 1).started(0).max_runtime(3600)]
    big = make_job(1).gpus(4).priority(10)
    plan = run(make_snapshot([make_node("n0").gpus(4)], [big], now=NOW, running=running))
    assert plan.preemptions and plan.reservations == []


def test_a_share_backfilled_onto_held_gpus_frees_what_the_hold_no_longer_needs() -> None:
    """The hold is restored only on GPUs the reserved job can still use: once a backfilled
    share leaves 20GiB on GPU 7, the 40GiB job no longer holds it, and a later share of
    the same shape fits again. The accelerated path does not keep the shape blocked
    across that release (``CycleState.released``): both paths place job 1."""
    node = make_node("n0").gpus(8, model="H100").exclusive(0, 1, 2, 3, 4, 6)
    running = [make_running(1002).on("n0", 0, 1, 2, 6).started(NOW)]
    running += [make_running(1003).on("n0", 3).started(NOW)]
    running += [make_running(1004).on("n0", 4).started(NOW)]
    share = make_job(2).gpus(2).gpu_memory("20GiB").priority(1)
    jobs = [
        share,
        make_job(3).gpus(2).gpu_memory("20GiB").priority(1).submitted(2),
        make_job(4).gpus(4).gpu_memory("40GiB").priority(1).submitted(3).cannot_preempt(),
        make_job(5).gpus(2).gpu_memory("20GiB").priority(1).submitted(4).max_runtime(300),
        make_job(1).gpus(2).gpu_memory("20GiB"),
    ]
    snapshot = make_snapshot([node], jobs, now=NOW, running=running)
    profile = build_profile(SchedulerConfig())
    accelerated, generic = run_cycle(snapshot, profile), run_cycle(snapshot, profile, index=False)
    assert accelerated == generic
    assert placement_of(accelerated, 1) is not None
