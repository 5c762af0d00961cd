"""Decayed usage history: exponential decay with a half-life, computed by hand."""

from __future__ import annotations

import math

import pytest
from tests.unit.queue.builders import GiB, gpus

from gpudock.queue import UsageHistory, decay_factor

HOUR = 3600.0


def started(at: float = 0.0, half_life: float = HOUR) -> UsageHistory:
    return UsageHistory(half_life).advance(at, {})


def test_the_first_advance_only_starts_the_clock() -> None:
    history = UsageHistory(HOUR).advance(100.0, {"a": gpus(8)})
    assert history.updated_at == 100.0 and history.averages == {}


def test_8_gpus_for_one_half_life_average_4() -> None:
    # A' = d*A + (1-d)*u with d = 0.5: 0.5*0 + 0.5*8 = 4
    history = started().advance(HOUR, {"a": gpus(8)})
    assert history.average("a")[0] == pytest.approx(4.0)


def test_idle_for_one_half_life_halves_the_history() -> None:
    history = started().advance(HOUR, {"a": gpus(8)}).advance(2 * HOUR, {})
    assert history.average("a")[0] == pytest.approx(2.0)


def test_two_half_lives_of_use_reach_three_quarters() -> None:
    history = started().advance(2 * HOUR, {"a": gpus(8)})  # d = 0.25
    assert history.average("a")[0] == pytest.approx(6.0)


def test_many_small_steps_equal_one_big_step() -> None:
    stepped = started()
    for minute in range(1, 61):
        stepped = stepped.advance(minute * 60.0, {"a": gpus(8)})
    assert stepped.average("a")[0] == pytest.approx(
        started().advance(HOUR, {"a": gpus(8)}).average("a")[0]
    )


def test_constant_usage_converges_to_itself() -> None:
    history = started().advance(50 * HOUR, {"a": gpus(8, "640GiB", cpus=32)})
    assert history.average("a") == pytest.approx((8.0, 640.0 * GiB, 32.0))


def test_the_integral_is_decayed_resource_seconds() -> None:
    history = started().advance(HOUR, {"a": gpus(8)})
    # 8 GPUs over one half-life, decayed: 8 * h * (1 - 1/2) / ln 2 GPU-seconds
    assert history.integral("a")[0] == pytest.approx(8 * HOUR * 0.5 / math.log(2))


def test_time_never_runs_backwards() -> None:
    history = started(at=100.0).advance(200.0, {"a": gpus(1)})
    assert history.advance(150.0, {"a": gpus(100)}) is history
    assert history.advance(200.0, {"a": gpus(100)}) is history


def test_advance_is_pure() -> None:
    before = started().advance(HOUR, {"a": gpus(8)})
    before.advance(2 * HOUR, {"a": gpus(100)})
    assert before.average("a")[0] == pytest.approx(4.0)


def test_negligible_entries_are_dropped() -> None:
    history = started().advance(HOUR, {"a": gpus(1)}).advance(100 * HOUR, {})
    assert "a" not in history.averages and history.average("a") == (0.0, 0.0, 0.0)


def test_round_trips_through_a_dict() -> None:
    history = started().advance(HOUR, {"a": gpus(8, "80GiB", cpus=2)})
    assert UsageHistory.from_dict(history.to_dict()) == history


def test_decay_factor_and_half_life_validation() -> None:
    assert decay_factor(2 * HOUR, HOUR) == 0.25
    with pytest.raises(ValueError, match="half_life must be greater than zero"):
        UsageHistory(0)
