"""Weighted DRF shares, the fair-share order and water-filling entitlements, by hand."""

from __future__ import annotations

from fractions import Fraction

import pytest
from tests.unit.queue.builders import GiB, QueueBuilder, gpus, make_queue, queue_set

from gpudock.queue import (
    Claim,
    FairShare,
    FairShareConfig,
    FairShareOrder,
    QueueSet,
    Resources,
    UsageHistory,
    dominant_share,
    entitlements,
    water_fill,
)
from gpudock.queue.resources import Quantity

# ── dominant shares ────────────────────────────────────────────────────────


def test_the_dominant_share_is_the_largest_resource_share() -> None:
    usage = (4.0, 100.0 * GiB, 8.0)
    capacity = (8.0, 640.0 * GiB, 64.0)
    assert dominant_share(usage, capacity, (1.0, 1.0, 1.0)) == 0.5  # GPUs: 4/8


def test_resource_weights_scale_and_zero_ignores() -> None:
    usage, capacity = (1.0, 0.0, 48.0), (8.0, 1.0, 64.0)
    assert dominant_share(usage, capacity, (1.0, 1.0, 1.0)) == 0.75  # CPUs: 48/64
    assert dominant_share(usage, capacity, (1.0, 1.0, 0.0)) == 0.125  # CPUs ignored
    assert dominant_share(usage, capacity, (2.0, 1.0, 0.0)) == 0.25


def test_resources_without_capacity_are_ignored() -> None:
    assert dominant_share((1.0, 0.0, 4.0), (8.0, 0.0, 0.0), (1.0, 1.0, 1.0)) == 0.125


def fair(
    *queues: QueueBuilder,
    capacity: Resources,
    history: UsageHistory | None = None,
    history_weight: float = 1.0,
) -> FairShare:
    config = FairShareConfig(history_weight=history_weight)
    return FairShare.build(queue_set(*queues), config, capacity, history)


def test_a_queue_weight_divides_its_share() -> None:
    shares = fair(make_queue("a"), make_queue("b").weight(2), capacity=gpus(8))
    assert shares.share("a", gpus(4)) == 0.5
    assert shares.share("b", gpus(4)) == 0.25
    assert shares.share("stranger", gpus(4)) == 0.5  # undeclared: weight 1


def test_history_adds_to_current_usage() -> None:
    history = UsageHistory(3600.0, 0.0, {"a": (4.0, 0.0, 0.0)})
    shares = fair(make_queue("a"), capacity=gpus(8), history=history, history_weight=0.5)
    # effective = 2 + 0.5 * 4 = 4 GPUs of 8
    assert shares.share("a", gpus(2)) == 0.5
    assert shares.current_share("a", gpus(2)) == 0.25


# ── the fair-share order ───────────────────────────────────────────────────


def run_order(
    shares: FairShare,
    jobs: dict[str, list[str]],
    running: dict[str, Resources] | None = None,
    admit: bool = True,
) -> list[str]:
    """Drain the order, charging 1 GPU per yielded job when ``admit``."""
    usage = dict(running or {})
    order = FairShareOrder(jobs, shares, lambda q: usage.get(q, Resources()))
    out: list[str] = []
    for job in order:
        out.append(job)
        if admit:
            queue = job.rstrip("0123456789")
            usage[queue] = usage.get(queue, Resources()) + gpus(1)
    return out


def six(queue: str) -> list[str]:
    return [f"{queue}{i}" for i in range(1, 7)]


def test_weights_1_and_2_take_turns_one_to_two() -> None:
    # shares a/8 and b/16: ties go to "a" (name order).
    shares = fair(make_queue("a"), make_queue("b").weight(2), capacity=gpus(8))
    assert run_order(shares, {"a": six("a"), "b": six("b")}) == [
        "a1", "b1", "b2", "a2", "b3", "b4", "a3", "b5", "b6", "a4", "a5", "a6",
    ]  # fmt: skip


def test_running_jobs_count_before_the_cycle_starts() -> None:
    shares = fair(make_queue("a"), make_queue("b"), capacity=gpus(8))
    order = run_order(shares, {"a": six("a"), "b": six("b")}, running={"a": gpus(2)})
    assert order[:4] == ["b1", "b2", "a1", "b3"]


def test_history_puts_a_heavy_past_user_behind() -> None:
    history = UsageHistory(3600.0, 0.0, {"a": (3.0, 0.0, 0.0)})
    shares = fair(make_queue("a"), make_queue("b"), capacity=gpus(8), history=history)
    assert run_order(shares, {"a": six("a"), "b": six("b")})[:5] == ["b1", "b2", "b3", "a1", "b4"]


def test_jobs_that_are_not_admitted_do_not_move_their_queue() -> None:
    shares = fair(make_queue("a"), make_queue("b"), capacity=gpus(8))
    order = run_order(shares, {"a": ["a1", "a2"], "b": ["b1"]}, admit=False)
    assert order == ["a1", "a2", "b1"]


def test_within_a_queue_the_given_order_is_kept() -> None:
    shares = fair(make_queue("a"), capacity=gpus(8))
    assert run_order(shares, {"a": ["a3", "a1", "a2"]}) == ["a3", "a1", "a2"]


def test_a_dropped_queue_yields_nothing_more() -> None:
    shares = fair(make_queue("a"), make_queue("b"), capacity=gpus(8))
    order = FairShareOrder({"a": ["a1", "a2"], "b": ["b1"]}, shares, lambda q: Resources())
    assert next(order) == "a1"
    order.drop("a")
    assert list(order) == ["b1"]


def test_charges_to_a_queue_waiting_in_line_are_seen() -> None:
    usage = {"a": Resources(), "b": Resources()}
    shares = fair(make_queue("a"), make_queue("b"), capacity=gpus(8))
    order = FairShareOrder({"a": ["a1", "a2"], "b": ["b1"]}, shares, lambda q: usage[q])
    assert next(order) == "a1"
    usage["b"] = gpus(4)  # b grew (e.g. charged by another path) while waiting
    assert list(order) == ["a2", "b1"]


# ── entitlements ───────────────────────────────────────────────────────────


def entitled(queues: QueueSet, capacity: int, **demand: int) -> dict[str, Quantity]:
    result = entitlements(queues, gpus(capacity), {q: gpus(d) for q, d in demand.items()})
    return {q: r.gpus for q, r in result.items()}


def test_capacity_is_split_by_weight() -> None:
    queues = queue_set(make_queue("a"), make_queue("b").weight(2))
    assert entitled(queues, 12, a=10, b=10) == {"a": 4, "b": 8}  # level 4: 4 and 2*4


def test_a_queue_capped_by_its_demand_leaves_the_rest_to_others() -> None:
    queues = queue_set(make_queue("a"), make_queue("b").weight(2))
    assert entitled(queues, 12, a=10, b=6) == {"a": 6, "b": 6}  # b full at 6, a rises to 6


def test_guarantees_are_floors() -> None:
    queues = queue_set(make_queue("a").guarantee(gpus=8), make_queue("b").weight(2))
    assert entitled(queues, 12, a=10, b=10) == {"a": 8, "b": 4}  # 8 + 2*2 = 12


def test_limits_are_caps() -> None:
    queues = queue_set(make_queue("a").limit(gpus=3), make_queue("b").weight(2))
    assert entitled(queues, 12, a=10, b=10) == {"a": 3, "b": 9}  # 3 + 2*4.5


def test_a_queue_that_cannot_borrow_is_entitled_to_its_guarantee_only() -> None:
    queues = queue_set(make_queue("a").guarantee(gpus=2).no_borrow(), make_queue("b"))
    assert entitled(queues, 12, a=10, b=10) == {"a": 2, "b": 10}


def test_when_everything_fits_each_gets_its_demand() -> None:
    queues = queue_set(make_queue("a"), make_queue("b"))
    assert entitled(queues, 12, a=3, b=0) == {"a": 3, "b": 0}


def test_splits_are_exact() -> None:
    queues = queue_set(make_queue("a"), make_queue("b"), make_queue("c"))
    assert entitled(queues, 10, a=9, b=9, c=9) == dict.fromkeys("abc", Fraction(10, 3))


def test_overcommitted_guarantees_are_scaled_down() -> None:
    queues = queue_set(make_queue("a").guarantee(gpus=10), make_queue("b").guarantee(gpus=10))
    assert entitled(queues, 12, a=10, b=10) == {"a": 6, "b": 6}


def test_each_resource_is_filled_on_its_own() -> None:
    queues = queue_set(make_queue("a"), make_queue("b"))
    demand = {"a": gpus(8, "100GiB"), "b": gpus(1, "500GiB")}
    result = entitlements(queues, gpus(8, "400GiB"), demand)
    assert result["a"] == gpus(7, "100GiB") and result["b"] == gpus(1, "300GiB")


@pytest.mark.parametrize(
    ("capacity", "claims", "expected"),
    [
        (10, [(1, 0, 10), (1, 0, 10)], [5, 5]),
        (10, [(1, 0, 2), (3, 0, 10)], [2, 8]),
        (10, [(1, 6, 10), (1, 0, 10)], [6, 4]),
        (0, [(1, 0, 10)], [0]),
        (10, [], []),
    ],
)
def test_water_fill(capacity: int, claims: list[tuple[int, int, int]], expected: list[int]) -> None:
    parts = [Claim(Fraction(w), Fraction(lo), Fraction(hi)) for w, lo, hi in claims]
    assert water_fill(Fraction(capacity), parts) == expected
