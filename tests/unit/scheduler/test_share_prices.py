"""Cutting-stock prices of GPU shares and what free capacity is worth at them."""

from __future__ import annotations

import pytest

from gpudock.scheduler.policies.share_price import lp
from gpudock.scheduler.policies.share_price.lp import (
    MILLI,
    maximal_patterns,
    priced_size,
    prices,
    values,
)


def test_two_halves_fill_a_gpu_so_each_is_priced_at_half() -> None:
    assert prices({500: 10}) == pytest.approx({500: 0.5})


def test_a_share_only_rare_small_shares_can_join_costs_a_whole_gpu_and_they_are_free() -> None:
    # Every 0.81 needs a GPU of its own; the two 0.16s ride in the gaps behind them for free.
    assert prices({810: 10, 160: 2}) == pytest.approx({810: 1.0, 160: 0.0}, abs=1e-9)


def test_prices_follow_the_proportions_not_the_counts() -> None:
    # Small shares now outnumber the gaps: the extra ones pack six to a GPU (1/6 each), and a
    # 0.81 costs what its GPU is worth less the 0.16 that joins it.
    expected = {810: 5 / 6, 160: 1 / 6}
    assert prices({810: 2, 160: 10}) == pytest.approx(expected)
    assert prices({810: 20, 160: 100}) == pytest.approx(expected)
    assert prices({810: 0.2, 160: 1.0}) == pytest.approx(expected)


def test_free_capacity_is_worth_the_best_priced_shares_that_fit_in_it() -> None:
    # 0.68 + 0.32 fill a GPU, three 0.32s nearly do, two 0.47s nearly do:
    # the 0.32 is priced at 1/3, the 0.68 at 2/3, the 0.47 at 1/2.
    price = prices({470: 4, 320: 2, 680: 1})
    assert price == pytest.approx({470: 0.5, 320: 1 / 3, 680: 2 / 3})
    value = values(price)
    assert len(value) == MILLI + 1
    assert value[MILLI] == pytest.approx(1.0)
    assert value[680] == pytest.approx(2 / 3)  # a 0.68, or two 0.32s
    assert value[530] == pytest.approx(0.5)  # a 0.47 fits, so does a 0.32 (worth less)
    assert value[210] == 0.0  # nothing priced fits
    # So a 0.32 behind a 0.47 loses 1/6 of a GPU's worth; on an idle GPU it loses nothing.
    assert value[530] - price[320] - value[210] == pytest.approx(1 / 6)
    assert value[MILLI] - price[320] - value[680] == pytest.approx(0.0, abs=1e-9)


def test_without_shares_only_an_idle_gpu_is_worth_anything() -> None:
    assert prices({}) == {}
    value = values({})
    assert value[MILLI] == 1.0
    assert set(value[:MILLI]) == {0.0}


@pytest.mark.parametrize(
    ("demand", "message"),
    [
        ({0: 1.0}, "share size must be 1-999 thousandths, got 0"),
        ({1000: 1.0}, "share size must be 1-999 thousandths, got 1000"),
        ({250: 0.0}, "share size 250: demand must be positive, got 0.0"),
    ],
)
def test_sizes_outside_a_gpu_and_empty_demand_are_refused(
    demand: dict[int, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        prices(demand)


@pytest.mark.parametrize(
    ("size", "priced_as"), [(1, 10), (10, 10), (11, 20), (125, 130), (470, 470), (995, 990)]
)
def test_sizes_are_priced_on_a_grid_of_hundredths_rounded_up(size: int, priced_as: int) -> None:
    assert priced_size(size) == priced_as


def test_the_maximal_patterns_are_those_with_no_room_for_one_more_share() -> None:
    assert sorted(maximal_patterns([300, 500], 10)) == [(0, 2), (1, 1), (3, 0)]
    assert maximal_patterns([300, 500], 2) is None  # more than the limit
    assert maximal_patterns([10, 20, 30, 40], 2000) is None  # tiny sizes: too many to list


@pytest.mark.parametrize("enumerate_up_to", [0, 2000], ids=["column generation", "all patterns"])
def test_both_ways_of_solving_give_the_lp_prices(
    monkeypatch: pytest.MonkeyPatch, enumerate_up_to: int
) -> None:
    monkeypatch.setattr(lp, "ENUMERATE", enumerate_up_to)
    assert prices({810: 2, 160: 10}) == pytest.approx({810: 5 / 6, 160: 1 / 6})
    assert prices({470: 4, 320: 2, 680: 1}) == pytest.approx({470: 1 / 2, 320: 1 / 3, 680: 2 / 3})
