"""Queueing strategies: the registry, ``borrow-last`` and ``strict-fifo`` as a cycle walks them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpudock.queue.strategies import DEFAULT, STRATEGIES, strategies


@dataclass(frozen=True)
class Job:
    id: int
    queue: str


def test_the_registry_names_each_strategy_and_refuses_an_unknown_one() -> None:
    assert set(STRATEGIES) == {"borrow-last", "strict-fifo"}
    assert [s.name for s in strategies(("strict-fifo", "borrow-last"))] == [
        "strict-fifo",
        "borrow-last",
    ]
    assert [s.name for s in strategies(DEFAULT)] == ["borrow-last"]
    with pytest.raises(ValueError, match=r"unknown queueing strategy 'lifo' \(known: "):
        strategies(("borrow-last", "lifo"))


def test_borrow_last_tries_borrowers_after_every_other_job_in_order() -> None:
    jobs = [Job(i, "a" if i % 2 else "b") for i in range(1, 7)]
    asked: list[int] = []

    def borrows(job: Job) -> bool:
        asked.append(job.id)
        return job.queue == "b"

    walk = STRATEGIES["borrow-last"].walk(borrows)
    walked = walk.jobs(iter(jobs))
    assert next(iter(walked)).id == 1
    assert asked == [1], "asked at each job's turn, not ahead"
    assert [j.id for j in walked] == [3, 5, 2, 4, 6]
    assert all(walk.hold(j) is None for j in jobs)


def test_borrow_last_without_quotas_keeps_the_order() -> None:
    jobs = [Job(1, "a"), Job(2, "b")]
    assert list(STRATEGIES["borrow-last"].walk(None).jobs(jobs)) == jobs


def test_strict_fifo_holds_a_queue_behind_its_first_job_not_placed() -> None:
    strict = STRATEGIES["strict-fifo"]
    assert not strict.reserves and STRATEGIES["borrow-last"].reserves
    walk = strict.walk(None)
    assert walk.hold(Job(1, "a")) is None
    walk.placed(Job(1, "a"))
    assert walk.hold(Job(2, "a")) is None  # job 2 is now the head of "a", and is not placed
    assert walk.hold(Job(3, "b")) is None  # another queue is not held
    reason = walk.hold(Job(4, "a"))
    assert reason is not None and reason.layer == "priority"
    assert "waits behind job 2" in reason.message
    assert reason.counterfactual == "starts after job 2 does"
