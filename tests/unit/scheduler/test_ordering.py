"""Step 1: who goes first. Priority, then first come first served, then id."""

from __future__ import annotations

from .builders import assert_pending, assert_placed, make_job, make_node, make_snapshot, run


def test_higher_priority_goes_first_even_if_submitted_later() -> None:
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(1)],
            [make_job(1).submitted(1.0), make_job(2).priority(10).submitted(2.0)],
        )
    )
    assert_placed(plan, 2)
    assert_pending(plan, 1, layer="devices")


def test_same_priority_is_first_come_first_served() -> None:
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(1)],
            [make_job(1).submitted(9.0), make_job(2).submitted(3.0)],
        )
    )
    assert_placed(plan, 2)
    assert_pending(plan, 1)


def test_same_priority_and_time_breaks_ties_by_id() -> None:
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(1)],
            [make_job(7).submitted(1.0), make_job(5).submitted(1.0)],
        )
    )
    assert_placed(plan, 5)
    assert_pending(plan, 7)


def test_negative_priority_goes_last() -> None:
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(1)],
            [make_job(1).priority(-5), make_job(2)],
        )
    )
    assert_placed(plan, 2)


def test_first_version_is_greedy_a_blocked_job_does_not_block_smaller_ones() -> None:
    # Job 1 (high priority) needs 4 GPUs, only 2 exist free; job 2 passes it.
    # A later issue adds EASY backfill, which allows this only when it does not
    # delay job 1.
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(4).exclusive(0, 1)],
            [make_job(1).gpus(4).priority(10), make_job(2).gpus(1)],
        )
    )
    assert_pending(plan, 1)
    assert_placed(plan, 2, node="n0", gpus=[2])


def test_earlier_placements_in_the_cycle_use_up_capacity() -> None:
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(2)],
            [make_job(1).submitted(1), make_job(2).submitted(2), make_job(3).submitted(3)],
        )
    )
    assert_placed(plan, 1, gpus=[0])
    assert_placed(plan, 2, gpus=[1])
    assert_pending(plan, 3, exact="needs 1 GPU; node n0 has 0 free")
