"""The ``default`` policy's estimator: Gittins ranks learnt from finished jobs only.

Hand-computed values on tiny samples. ``G(a) = sup_Δ P(D - a <= Δ | D > a) /
E[min(D - a, Δ) | D > a]`` and the estimator returns ``1 / G(a)`` seconds;
ages other than 0 are taken at the lower edge of their 1% bin, so those
values are checked to 1%.
"""

from __future__ import annotations

import bisect
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.sim import estimate
from gpudock.sim.estimate import SIBLING_GAP, RemainingEstimator, Rule, _bin
from gpudock.sim.policies import PRIORITY_STEPS


def estimator_of(durations: list[float], rule: Rule = "gittins") -> RemainingEstimator:
    estimator = RemainingEstimator(min_history=len(durations), rule=rule)
    for duration in durations:
        estimator.record("q", 1, duration)
    return estimator


def brute_gittins(durations: list[float], age: float, binned: bool = False) -> float:
    """``1 / G(age)`` by trying every quantum that ends at a recorded duration (``binned``:
    only at the longest run of each 1% bin, as the estimator's builds do)."""
    above = [d for d in durations if d > age]
    ends = set(above)
    if binned:
        ends = {max(d for d in above if _bin(d) == _bin(end)) for end in ends}
    best = max(sum(d <= end for d in above) / sum(min(d, end) - age for d in above) for end in ends)
    return 1 / best


def test_a_new_job_of_a_heavy_tailed_class_ranks_by_its_likely_short_run() -> None:
    """Finished 10, 10, 100, 1000 s. At age 0 the quanta ending at 10, 100, 1000 s
    complete with probability 1/2, 3/4, 1 for an expected 10, 55, 280 s of service:
    rates 1/20, 3/220, 1/280. The best, 1/20, gives 20 s; the conditional mean is 280 s."""
    durations = [10.0, 10.0, 100.0, 1000.0]
    assert estimator_of(durations).remaining("q", 1, 0) == pytest.approx(20)
    assert estimator_of(durations, "mean").remaining("q", 1, 0) == pytest.approx(280)


def test_the_rank_grows_as_a_job_outlives_its_peers() -> None:
    """Same sample. At 50 s, 100 and 1000 remain: the quantum to 100 completes half of
    them for 50 s each, rate 1/100 (to 1000: rate 2/1000). At 150 s only 1000 remains:
    850 s, the remaining time itself. Past 1000 s no peer outlasted it: the attained time."""
    estimator = estimator_of([10.0, 10.0, 100.0, 1000.0])
    assert estimator.remaining("q", 1, 50) == pytest.approx(100, rel=0.01)
    assert estimator.remaining("q", 1, 150) == pytest.approx(850, rel=0.01)
    assert estimator.remaining("q", 1, 1000) == 1000
    assert estimator.remaining("q", 1, 5000) == 5000


def test_for_a_light_tailed_class_the_rank_is_the_expected_remaining_time() -> None:
    """Finished 90, 100, 110 s: the longest quantum is the best. At age 0, to 90 s
    completes 1/3 for an expected 90 s (rate 1/270); to 100 s, 2/3 for 290/3 s (1/145);
    to 110 s, all for 100 s (1/100): 100 s, the expected remaining time."""
    estimator = estimator_of([90.0, 100.0, 110.0])
    assert estimator.remaining("q", 1, 0) == pytest.approx(100)


def test_a_class_needs_min_history_then_falls_back() -> None:
    """Under ``min_history`` finishes a class uses its GPU bucket, then all jobs; with
    none anywhere, the attained time (least attained service, at least 1 s)."""
    estimator = RemainingEstimator(min_history=2)
    assert estimator.remaining("x", 1, 0) == 1.0
    assert estimator.remaining("x", 1, 7) == 7.0
    estimator.record("x", 1, 10)
    estimator.record("y", 8, 30)
    assert estimator.remaining("x", 1, 0) == pytest.approx(20)  # all jobs: 10, 30 -> 20
    estimator.record("y", 8, 50)
    assert estimator.remaining("y", 8, 0) == pytest.approx(40)  # bucket 8: 30, 50 -> 40


def test_a_whole_node_job_ranks_by_its_queues_jobs_of_every_size() -> None:
    """With ``whole_node`` = 8, a job of 8 GPUs or more (gangs too) reads its queue's
    finishes of every GPU count, then all jobs'; smaller jobs read their size class."""
    estimator = RemainingEstimator(min_history=2, whole_node=8)
    for duration in (10.0, 10.0):
        estimator.record("q", 1, duration)
    for duration in (1000.0, 1000.0):
        estimator.record("q", 8, duration)
    estimator.record("r", 8, 5.0)
    # queue q, every size: 10, 10, 1000, 1000 -> a quantum to 10 s completes half
    # for 10 s of service: 1 / G = 20 s; the 8-GPU class alone would say 1000 s
    assert estimator.remaining("q", 8, 0) == pytest.approx(20)
    assert estimator.remaining("q", 16, 0) == pytest.approx(20)
    assert estimator.remaining("q", 1, 0) == pytest.approx(10)  # its class: 10, 10
    # all jobs: 5, 10, 10, 1000, 1000; to 10 s completes 3/5 for 9 s on average: 15 s
    assert estimator.remaining("q", 4, 0) == pytest.approx(15)  # no 4-GPU history yet
    assert estimator.remaining("r", 8, 0) == pytest.approx(15)  # queue r: 1 < min_history
    assert RemainingEstimator(min_history=2).remaining("q", 8, 0) == 1.0  # nothing learnt


def test_whole_node_jobs_read_their_size_class_without_a_node_size() -> None:
    """Without ``whole_node`` (the default) every job reads its size class."""
    estimator = RemainingEstimator(min_history=2)
    for gpus, duration in ((1, 10.0), (1, 10.0), (8, 1000.0), (8, 1000.0)):
        estimator.record("q", gpus, duration)
    assert estimator.remaining("q", 8, 0) == pytest.approx(1000)


def test_the_build_is_refreshed_after_sqrt_n_new_finishes() -> None:
    """Built at n = 4, the ranks move once sqrt(4) = 2 more jobs have finished, not after
    one: 1 new finish moves the empirical CDF by at most 1/5, below its sampling error."""
    estimator = estimator_of([10.0, 10.0, 100.0, 1000.0])
    assert estimator.remaining("q", 1, 0) == pytest.approx(20)
    estimator.record("q", 1, 10)
    assert estimator.remaining("q", 1, 0) == pytest.approx(20)
    estimator.record("q", 1, 10)  # 10 x4, 100, 1000: to 10 s completes 4/6 for 10 s
    assert estimator.remaining("q", 1, 0) == pytest.approx(15)


def test_the_conditional_mean_rule_is_exact() -> None:
    """``rule="mean"``: E[D - a | D > a], exact at any age (the age's bin is split)."""
    estimator = estimator_of([30.0, 10.0, 100.0, 20.0], "mean")
    assert estimator.remaining("q", 1, 15) == 35  # (20 + 30 + 100) / 3 - 15
    assert estimator.remaining("q", 1, 20) == 45  # D > a strictly
    assert estimator.remaining("q", 1, 19.99) == pytest.approx(50 - 19.99)  # 20 counts


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 5000), min_size=1, max_size=40),
    st.floats(0, 6000, allow_nan=False),
)
def test_gittins_matches_brute_force_and_never_exceeds_the_mean(
    durations: list[int], age: float
) -> None:
    """For any sample: the rank equals the brute-force ``1 / G`` at the lower edge of
    the age's bin over quanta that end at a bin's longest run; it is never below the
    exact ``1 / G`` there (fewer quanta) and at most the expected remaining time (the
    quantum ``Δ = ∞``)."""
    sample = [float(d) for d in durations]
    gittins, mean = estimator_of(sample), estimator_of(sample, "mean")
    rank = gittins.remaining("q", 1, age)
    if age >= max(sample):  # nobody outlasted it: least attained service
        assert rank == max(age, 1.0)
        return
    edge = math.expm1(_bin(age) / PRIORITY_STEPS)
    assert rank == pytest.approx(brute_gittins(sample, edge, binned=True), rel=1e-9)
    assert rank >= brute_gittins(sample, edge) * (1 - 1e-9)
    assert rank <= mean.remaining("q", 1, edge) * (1 + 1e-9)


def scanned(curve: estimate._Curve, b: int) -> float:
    """``1 / G`` at bin ``b``'s lower edge by a scan of every later point of ``curve``."""
    edge = estimate._EDGES[b]
    k = bisect.bisect_right(curve._ends, edge)
    if k == len(curve._ends):
        return math.inf
    done = curve._done[k]
    x = curve._work[k] + (curve._n - done) * edge
    return 1.0 / max(
        (curve._ys[j] - done) / max(curve._xs[j] - x, estimate._TINY)
        for j in range(k, len(curve._ends))
    )


@settings(max_examples=200)
@given(
    st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=300),
    st.lists(st.floats(0, 1.2e6, allow_nan=False), min_size=1, max_size=10),
)
def test_the_hull_walk_finds_the_steepest_later_point(
    durations: list[float], ages: list[float]
) -> None:
    """A look-up walks the upper convex hull of the later points instead of scanning them
    all: it finds the same steepest slope as the scan (to rounding: a point left off the
    hull as on a line between two others ties with them)."""
    estimator = estimator_of(durations)
    history = estimator._runs.chain("q", 1)[0]  # the class's own: it has enough runs
    curve = estimate._Curve(history._bin_counts, history._bin_sums, history._bin_longest)
    for age in ages:
        b = _bin(age)
        assert curve.rank(b) == pytest.approx(scanned(curve, b), rel=1e-12)


def test_the_hull_walk_goes_past_a_point_under_the_hull() -> None:
    """Finished 1 x 10 s, 1 x 100 s and 100 x 1000 s (102 jobs). From age 0 the slopes to
    the quanta's points are 1 / 1020 (to 10 s: 1 done for 102 x 10 s), 2 / 10110 (to
    100 s), then 102 / 100110 (to 1000 s), the steepest: they fall, then rise. The 100 s
    point lies under the line from the 10 s point to the 1000 s one, so the hull leaves it
    out and the walk reaches the 1000 s point: rank 100110 / 102 s, not the 1020 s that
    stopping at the first fall would give."""
    estimator = estimator_of([10.0, 100.0] + [1000.0] * 100)
    assert estimator.remaining("q", 1, 0) == pytest.approx(100110 / 102)
    curve = estimator._runs.chain("q", 1)[0]._curve
    assert curve is not None
    for age in (0.0, 11.0, 50.0, 150.0, 999.0):
        assert curve.rank(_bin(age)) == scanned(curve, _bin(age))


def test_remaining_reads_nothing_but_recorded_finishes() -> None:
    """Two estimators fed the same finishes (in any order) give the same ranks: a rank is
    a function of finished jobs' run times only, never of the job being ranked."""
    finishes = [5.0, 7.0, 7.0, 60.0, 3600.0, 86400.0]
    one, other = estimator_of(finishes), estimator_of(list(reversed(finishes)))
    for age in (0, 6, 100, 5000):
        assert one.remaining("q", 1, age) == other.remaining("q", 1, age)


def test_a_quantum_ends_at_the_longest_run_of_a_bin() -> None:
    """Finished 200 x 9.92 s, 1 x 10.02 s (one 1% bin, [9.913, 10.023) s) and 1000 x 1000 s.
    Quanta end at a bin's longest run: at age 0, to 10.02 s completes 201 of 1201 for
    200 x 9.92 + 1001 x 10.02 s of service, rank 59.77 s (to 1000 s: 836 s). Ending
    inside the bin, at 9.92 s, would be slightly better (1201 x 9.92 / 200 = 59.57 s): the
    estimator gives up under 1% for not splitting bins."""
    estimator = estimator_of([9.92] * 200 + [10.02] + [1000.0] * 1000)
    assert _bin(9.92) == _bin(10.02)
    rank = estimator.remaining("q", 1, 0)
    assert rank == pytest.approx((200 * 9.92 + 1001 * 10.02) / 201)
    assert brute_gittins([9.92] * 200 + [10.02] + [1000.0] * 1000, 0) == pytest.approx(
        1201 * 9.92 / 200
    )
    assert rank / (1201 * 9.92 / 200) < 1.01


def test_version_moves_only_when_a_rank_may_move() -> None:
    """A pending job's rank is recomputed only when ``version`` changes: when a class
    starts to count (``min_history``), when its build goes stale (sqrt(n) new finishes
    since it was built) and when its longest run grows; not after every finish."""
    estimator = RemainingEstimator(min_history=4)
    seen = [estimator.version("q", 1)]
    for duration in (10.0, 10.0, 100.0, 1000.0):
        estimator.record("q", 1, duration)
        seen.append(estimator.version("q", 1))
    assert seen[4] != seen[3]  # the class (and the others) reached min_history
    assert estimator.remaining("q", 1, 0) == pytest.approx(20)  # built at n = 4
    before = estimator.version("q", 1)
    estimator.record("q", 1, 10)
    assert estimator.version("q", 1) == before  # 1 finish < sqrt(4): same ranks
    assert estimator.remaining("q", 1, 0) == pytest.approx(20)
    estimator.record("q", 1, 10)
    assert estimator.version("q", 1) != before  # 2 finishes: stale, rebuilt on look-up
    assert estimator.remaining("q", 1, 0) == pytest.approx(15)
    after = estimator.version("q", 1)
    estimator.record("q", 1, 5000)  # a new longest run: ranks past 1000 s now come from here
    assert estimator.version("q", 1) != after
    assert estimator.remaining("q", 1, 2000) == pytest.approx(3000, rel=0.01)


def test_the_mean_rule_moves_with_every_finish() -> None:
    """``rule="mean"`` is exact, so any finish may move it: ``version`` changes each time."""
    estimator = estimator_of([10.0, 20.0], "mean")
    before = estimator.version("q", 1)
    estimator.record("q", 1, 10)
    assert estimator.version("q", 1) != before


def test_ranked_says_how_long_a_rank_holds() -> None:
    """Finished 10, 10, 100, 1000 s. At 50 s the rank (100 s) is read from the 1% bin
    holding 50 s, so it holds until the bin's upper edge; in the bin holding the longest
    run, until that run (past it, ranks fall back to the attained time, which moves with
    every second: it holds nowhere beyond)."""
    estimator = estimator_of([10.0, 10.0, 100.0, 1000.0])
    rank, until = estimator.ranked("q", 1, 50)
    assert rank == pytest.approx(100, rel=0.01)
    assert until == pytest.approx(math.expm1((_bin(50) + 1) / PRIORITY_STEPS))
    assert estimator.remaining("q", 1, until * (1 - 1e-9)) == rank
    assert estimator.ranked("q", 1, 999.5)[1] == 1000  # 999.5 and 1000 share a bin
    assert estimator.ranked("q", 1, 1500) == (1500, 1500)


# ── close siblings ─────────────────────────────────────────────────────────


def test_a_close_sibling_is_the_nearest_finished_job_of_its_class() -> None:
    """Of the finished jobs of the same queue and GPU count, the one submitted nearest,
    at most ``SIBLING_GAP`` seconds away (the earlier of two as near); only jobs
    recorded with their submit time count."""
    estimator = RemainingEstimator()
    estimator.record("q", 1, 50, submitted=100)
    estimator.record("q", 1, 70, submitted=112)
    estimator.record("q", 2, 999, submitted=101)
    estimator.record("q", 1, 5)  # no submit time: not a sibling
    assert estimator.sibling("q", 1, 105) == 50  # 5 s against 7 s
    assert estimator.sibling("q", 1, 106) == 50  # 6 s each: the earlier
    assert estimator.sibling("q", 1, 107) == 70
    assert estimator.sibling("q", 1, 112 + SIBLING_GAP) == 70
    assert estimator.sibling("q", 1, 112 + SIBLING_GAP + 1) is None
    assert estimator.sibling("q", 1, 100 - SIBLING_GAP - 1) is None
    assert estimator.sibling("q", 2, 105) == 999  # the GPU count must match
    assert estimator.sibling("r", 1, 105) is None  # and the queue


def twins(count: int, ratio: float) -> RemainingEstimator:
    """``count`` pairs of close siblings whose second run is ``ratio`` times the first,
    pairs far apart, first runs 10, 20, 30... s."""
    estimator = RemainingEstimator(min_history=count)
    for i in range(count):
        estimator.record("q", 1, 10.0 * (i + 1), submitted=1000.0 * i)
        estimator.record("q", 1, 10.0 * (i + 1) * ratio, submitted=1000.0 * i + 1)
    return estimator


def test_a_sibling_scales_the_rank_by_the_learnt_ratios() -> None:
    """Every second twin ran as long as the first (ratio 1, always): a job whose close
    sibling ran 500 s is taken to run 500 s, so its rank is its true remaining time.
    Without a sibling the class's own Gittins rank applies (runs of 10-200 s)."""
    estimator = twins(20, 1.0)
    assert estimator.remaining("q", 1, 0, sibling=500) == pytest.approx(500)
    assert estimator.remaining("q", 1, 200, sibling=500) == pytest.approx(300, rel=0.01)
    assert estimator.remaining("q", 1, 600, sibling=500) == 600  # past it: attained time
    assert estimator.remaining("q", 1, 0) == pytest.approx(
        brute_gittins([10.0 * (i + 1) for i in range(20)] * 2, 0)
    )


def test_ratios_spread_the_rank_as_runs_spread() -> None:
    """Second twins ran twice as long as the first: a sibling of 100 s predicts 200 s."""
    assert twins(20, 2.0).remaining("q", 1, 0, sibling=100) == pytest.approx(200)


def test_siblings_need_min_history_ratios_and_the_gittins_rule() -> None:
    """Under ``min_history`` ratios (anywhere) the sibling is ignored; so it is by the
    ``mean`` rule, whose ranks are the class's conditional means."""
    few = twins(20, 1.0)
    few._min = 21  # 20 ratios, 40 runs: only the runs count
    assert few.remaining("q", 1, 0, sibling=500) == few.remaining("q", 1, 0)
    mean = RemainingEstimator(min_history=2, rule="mean")
    for i in range(4):
        mean.record("q", 1, 10.0, submitted=float(i))
    assert mean.remaining("q", 1, 0, sibling=1000) == 10


def test_version_moves_when_the_ratios_may_move_a_rank() -> None:
    """A sibling's rank reads the ratios too, so they move ``version`` as runs do: a
    new longest ratio, and the ratios reaching ``min_history``; a finish without a
    close sibling adds no ratio."""
    estimator = RemainingEstimator(min_history=2)
    for i in range(2):
        estimator.record("q", 1, 10.0, submitted=100.0 * i)
    before = estimator.version("q", 1)
    estimator.record("q", 1, 10.0, submitted=5000.0)  # no sibling, nothing new
    assert estimator.version("q", 1) == before
    estimator.record("q", 1, 10.0, submitted=5001.0)  # the first ratio
    first = estimator.version("q", 1)
    assert first != before
    estimator.record("q", 1, 10.0, submitted=1.0)  # the second: the ratios count now
    assert estimator.version("q", 1) != first
