"""Step 0 of the cycle (``scheduler/hold.py``): a held job is never scheduled."""

from __future__ import annotations

from tests.unit.scheduler.builders import make_job, make_node, make_running, make_snapshot, run

from gpudock.core.job import PendingReason
from gpudock.scheduler.hold import held_reason, withhold


def test_a_held_job_is_not_placed_and_says_who_holds_it() -> None:
    snapshot = make_snapshot(
        [make_node("n0").gpus(4)], [make_job(1).gpus(2).held_by("alice"), make_job(2).gpus(2)]
    )

    plan = run(snapshot)

    assert [p.job_id for p in plan.placements] == [2]
    assert plan.pending[1] == [
        PendingReason("hold", "held by alice", "runs once released (gpudock release JOB)")
    ]


def test_a_held_job_first_in_line_leaves_the_gpus_to_the_next_one() -> None:
    # job 1 would take every GPU (highest priority); held, job 2 starts instead
    snapshot = make_snapshot(
        [make_node("n0").gpus(2)],
        [make_job(1).gpus(2).priority(10).held_by("bob"), make_job(2).gpus(2)],
    )

    plan = run(snapshot)

    assert [p.job_id for p in plan.placements] == [2]
    assert [r.layer for r in plan.pending[1]] == ["hold"]


def test_a_held_job_neither_reserves_nor_preempts() -> None:
    snapshot = make_snapshot(
        [make_node("n0").gpus(2)],
        [make_job(1).gpus(2).priority(100).held_by("bob")],
        running=[make_running(9).on("n0", 0, 1).priority(0)],
    )

    plan = run(snapshot)

    assert plan.preemptions == [] and plan.reservations == [] and plan.placements == []
    assert plan.pending == {1: [held_reason("bob")]}


def test_withhold_leaves_a_snapshot_without_held_jobs_as_it_is() -> None:
    snapshot = make_snapshot([make_node("n0").gpus(1)], [make_job(1), make_job(2)])

    same, held = withhold(snapshot)

    assert same is snapshot and held == {}
    released = make_snapshot([make_node("n0").gpus(1)], [make_job(1).held_by("x"), make_job(2)])
    rest, held = withhold(released)
    assert [j.id for j in rest.pending] == [2] and list(held) == [1]
