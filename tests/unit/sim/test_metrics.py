"""Simulator metrics: exact figures from hand-built runs."""

from __future__ import annotations

import json

import pytest

from gpudock.sim.metrics import (
    best_deployable,
    compare,
    fairness_gap,
    jct_cdf,
    percentile,
    queue_delay_over_time,
    recommend,
    step_average,
    summarize,
    utilization_over_time,
)
from gpudock.sim.results import JobRecord, RunRecord

SUMMARY_KEYS = {
    "policy",
    "description",
    "oracle",
    "jobs",
    "unfinished",
    "skipped_jobs",
    "refused",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "avg_queue_delay_s",
    "makespan_s",
    "gpu_utilization",
    "preemptions",
    "cycles",
    "sim_seconds",
    "per_queue",
}
QUEUE_KEYS = {"jobs", "avg_jct_s", "avg_queue_delay_s", "share_received", "share_entitled"}


def job(
    job_id: str = "j",
    *,
    queue: str = "q",
    submit: float = 0.0,
    start: float | None = None,
    end: float | None = None,
) -> JobRecord:
    duration = 0.0 if start is None or end is None else end - start
    return JobRecord(job_id, queue, submit, duration, 1.0, start=start, end=end)


def finished(job_id: str, submit: float, start: float, end: float, queue: str = "q") -> JobRecord:
    return job(job_id, queue=queue, submit=submit, start=start, end=end)


def run(
    jobs: list[JobRecord], *, policy: str = "fifo", total_gpus: float = 8, **kw: object
) -> RunRecord:
    record = RunRecord(
        policy=policy, description=f"{policy} policy", oracle=False, total_gpus=total_gpus
    )
    record.jobs = jobs
    for name, value in kw.items():
        setattr(record, name, value)
    return record


# ---- step functions ------------------------------------------------------------


def test_step_average_weights_each_value_by_how_long_it_holds() -> None:
    # 4 of 8 GPUs for 10 s, then 8 of 8 for 10 s
    assert step_average([(0, 4), (10, 8)], 0, 20) / 8 == 0.75


def test_step_function_is_zero_before_its_first_point_and_holds_its_last() -> None:
    assert step_average([(10, 4)], 0, 20) == 2.0
    assert step_average([(0, 4)], 100, 200) == 4.0


def test_step_points_may_come_unsorted_and_the_later_of_equal_times_wins() -> None:
    assert step_average([(10, 8), (0, 4)], 0, 20) == 6.0
    assert step_average([(0, 1), (0, 3)], 0, 10) == 3.0


def test_step_average_over_a_slice_inside_the_steps() -> None:
    assert step_average([(0, 0), (5, 10), (15, 0)], 10, 20) == 5.0


def test_step_average_refuses_an_empty_interval() -> None:
    with pytest.raises(ValueError, match="empty interval"):
        step_average([(0, 1)], 5, 5)


# ---- percentiles -----------------------------------------------------------------


def test_percentiles_are_nearest_rank() -> None:
    values = [10.0, 20.0, 30.0, 40.0]
    assert percentile(values, 50) == 20.0
    assert percentile(values, 99) == 40.0
    assert percentile(values, 100) == 40.0
    assert percentile(list(range(1, 201)), 99) == 198  # rank 198 exactly, no float creep
    assert percentile([], 50) is None


@pytest.mark.parametrize("p", [0, -1, 101])
def test_percentile_outside_0_100_is_refused(p: float) -> None:
    with pytest.raises(ValueError, match="percentile"):
        percentile([1.0], p)


# ---- summarize -----------------------------------------------------------------


def test_summary_has_exactly_the_documented_keys_and_is_json_ready() -> None:
    summary = summarize(run([finished("a", 0, 0, 10)], queue_share={"q": [(0, 1)]}))
    assert set(summary) == SUMMARY_KEYS
    per_queue = summary["per_queue"]
    assert isinstance(per_queue, dict)
    assert set(per_queue["q"]) == QUEUE_KEYS
    json.dumps(compare([run([]), run([finished("a", 0, 0, 10)])]))


def test_jct_average_and_percentiles_over_finished_jobs() -> None:
    # JCTs 10, 20, ..., 1000
    jobs = [finished(f"j{i}", 0, 0, 10.0 * i) for i in range(1, 101)]
    summary = summarize(run([*jobs, job("never", submit=0)]))
    assert summary["jobs"] == 100
    assert summary["unfinished"] == 1
    assert summary["avg_jct_s"] == 505.0
    assert summary["p50_jct_s"] == 500.0
    assert summary["p99_jct_s"] == 990.0


def test_queue_delay_covers_every_started_job_even_unfinished() -> None:
    jobs = [
        finished("a", submit=0, start=10, end=20),
        job("running", submit=5, start=35),  # started, not finished: delay 30
        job("waiting", submit=5),  # never started: not in the average
    ]
    summary = summarize(run(jobs))
    assert summary["avg_queue_delay_s"] == 20.0
    assert summary["unfinished"] == 2
    assert summary["jobs"] == 1


def test_makespan_runs_from_first_submission_to_last_completion() -> None:
    jobs = [job("early", submit=2), finished("a", 5, 5, 50), finished("b", 7, 10, 30)]
    assert summarize(run(jobs))["makespan_s"] == 48.0


def test_utilization_is_the_time_average_over_the_makespan_window() -> None:
    jobs = [finished("a", 0, 0, 20)]
    summary = summarize(run(jobs, utilization=[(0, 4), (10, 8), (20, 0), (50, 8)]))
    assert summary["gpu_utilization"] == 0.75  # what happens after the last completion is out


def test_per_queue_figures_and_share_received_vs_entitled() -> None:
    jobs = [
        finished("a1", 0, 0, 10, queue="a"),
        finished("a2", 0, 4, 20, queue="a"),
        finished("b1", 0, 0, 20, queue="b"),
    ]
    record = run(
        jobs,
        queue_share={"a": [(0, 2), (10, 0)], "b": [(0, 6)]},
        entitled={"a": 0.5, "b": 0.25, "idle": 0.25},
    )
    per_queue = summarize(record)["per_queue"]
    assert per_queue == {
        "a": {
            "jobs": 2,
            "avg_jct_s": 15.0,
            "avg_queue_delay_s": 2.0,
            "share_received": 0.125,  # 2 of 8 GPUs for half the 20 s window
            "share_entitled": 0.5,
        },
        "b": {
            "jobs": 1,
            "avg_jct_s": 20.0,
            "avg_queue_delay_s": 0.0,
            "share_received": 0.75,
            "share_entitled": 0.25,
        },
        "idle": {
            "jobs": 0,
            "avg_jct_s": None,
            "avg_queue_delay_s": None,
            "share_received": 0.0,
            "share_entitled": 0.25,
        },
    }


def test_a_queue_without_an_entitlement_reports_none() -> None:
    per_queue = summarize(run([finished("a", 0, 0, 10, queue="x")]))["per_queue"]
    assert isinstance(per_queue, dict)
    assert per_queue["x"]["share_entitled"] is None


def test_figures_are_rounded_seconds_to_1_decimal_fractions_to_4() -> None:
    jobs = [finished("a", 0, 0, 1), finished("b", 0, 0, 1), finished("c", 0, 0, 2)]
    summary = summarize(run(jobs, total_gpus=3, utilization=[(0, 1)], sim_seconds=0.123456))
    assert summary["avg_jct_s"] == 1.3
    assert summary["gpu_utilization"] == 0.3333
    assert summary["sim_seconds"] == 0.123


def test_run_counters_are_passed_through() -> None:
    record = run([], preemptions=3, cycles=40, skipped_jobs=2)
    record.oracle = True
    summary = summarize(record)
    assert (summary["preemptions"], summary["cycles"], summary["skipped_jobs"]) == (3, 40, 2)
    assert summary["oracle"] is True
    assert summary["policy"] == "fifo"
    assert summary["description"] == "fifo policy"


def test_an_empty_run_gives_none_not_zero_division() -> None:
    summary = summarize(run([], total_gpus=0))
    assert summary["jobs"] == 0
    assert summary["unfinished"] == 0
    for key in ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_delay_s"):
        assert summary[key] is None
    assert summary["makespan_s"] is None
    assert summary["gpu_utilization"] is None
    assert summary["per_queue"] == {}


def test_a_run_where_nothing_finished_has_no_window() -> None:
    summary = summarize(
        run([job("a", submit=0, start=3), job("b", submit=1)], utilization=[(3, 1)])
    )
    assert summary["unfinished"] == 2
    assert summary["avg_jct_s"] is None
    assert summary["avg_queue_delay_s"] == 3.0
    assert summary["makespan_s"] is None
    assert summary["gpu_utilization"] is None


def test_compare_keeps_the_order_of_the_runs() -> None:
    runs = [run([], policy="b"), run([], policy="a")]
    assert [s["policy"] for s in compare(runs)] == ["b", "a"]


# ---- time series ------------------------------------------------------------------


def test_jct_cdf_counts_unfinished_jobs_in_the_denominator() -> None:
    record = run([finished("a", 0, 0, 30), finished("b", 0, 0, 10), job("c"), job("d")])
    assert jct_cdf(record) == ([10.0, 30.0], [0.25, 0.5])


def test_queue_delay_over_time_bins_by_submission() -> None:
    jobs = [
        finished("a", submit=0, start=10, end=20),
        finished("b", submit=4, start=8, end=20),
        job("c", submit=6),  # never started: left out
        finished("d", submit=10, start=40, end=50),
    ]
    assert queue_delay_over_time(run(jobs), 2) == [(2.5, 7.0), (7.5, 30.0)]
    assert queue_delay_over_time(run(jobs), 5) == [
        (1.0, 10.0),
        (3.0, None),
        (5.0, 4.0),  # b, submitted at 4: slices are [lo, hi)
        (7.0, None),  # c never started
        (9.0, 30.0),
    ]


def test_queue_delay_over_time_with_one_submission_instant_or_no_jobs() -> None:
    assert queue_delay_over_time(run([finished("a", 3, 5, 9)]), 10) == [(3.0, 2.0)]
    assert queue_delay_over_time(run([]), 10) == []
    with pytest.raises(ValueError, match="bins"):
        queue_delay_over_time(run([]), 0)


def test_utilization_over_time_averages_each_slice_of_the_window() -> None:
    record = run([finished("a", 0, 0, 20)], utilization=[(0, 4), (10, 8)])
    assert utilization_over_time(record, 2) == [(5.0, 0.5), (15.0, 1.0)]
    assert utilization_over_time(record, 4) == [(2.5, 0.5), (7.5, 0.5), (12.5, 1.0), (17.5, 1.0)]
    assert utilization_over_time(run([]), 4) == []


# ---- recommendation ----------------------------------------------------------------


def policy_summary(
    policy: str,
    avg: float | None,
    *,
    p99: float | None = None,
    oracle: bool = False,
    preemptions: int = 0,
    unfinished: int = 0,
    shares: dict[str, tuple[float, float]] | None = None,
) -> dict[str, object]:
    return {
        "policy": policy,
        "oracle": oracle,
        "avg_jct_s": avg,
        "p50_jct_s": avg,
        "p99_jct_s": p99 if p99 is not None else avg,
        "preemptions": preemptions,
        "unfinished": unfinished,
        "gpu_utilization": 0.5,
        "per_queue": {
            q: {"share_received": r, "share_entitled": e} for q, (r, e) in (shares or {}).items()
        },
    }


def test_fairness_gap_is_the_largest_distance_from_entitlement() -> None:
    summary = policy_summary("p", 1, shares={"a": (0.7, 0.5), "b": (0.3, 0.45)})
    assert fairness_gap(summary) == 0.2
    assert fairness_gap(policy_summary("p", 1)) is None


def test_the_best_deployable_policy_is_recommended_even_when_an_oracle_is_better() -> None:
    summaries = [
        policy_summary("srtf", 10_000, oracle=True),
        policy_summary("fifo", 20_000),
        policy_summary("default", 15_210),
    ]
    assert best_deployable(summaries) is summaries[2]
    text = recommend(summaries)
    assert text.startswith("Recommended: default.")
    assert (
        "lowest average JCT of the 2 deployable policies (15,210 s; 1.52x the srtf oracle" in text
    )


def test_only_oracles_means_no_recommendation() -> None:
    summaries = [policy_summary("srtf", 10, oracle=True), policy_summary("fifo", None)]
    assert best_deployable(summaries) is None
    assert "none is recommended" in recommend(summaries)
    assert "srtf" not in recommend(summaries)


def test_the_recommendation_names_rivals_that_beat_it_on_tail_and_fairness() -> None:
    summaries = [
        policy_summary("fast", 100, p99=900, preemptions=12, shares={"a": (0.9, 0.5)}),
        policy_summary("fair", 150, p99=400, preemptions=2, shares={"a": (0.55, 0.5)}),
    ]
    text = recommend(summaries)
    assert text.startswith("Recommended: fast.")
    assert "it preempted 12 times" in text
    assert "fair has a lower p99 JCT (400 s vs 900 s)" in text
    assert "fair has a smaller fairness gap (5.0% vs 40.0%)" in text
    assert "fair has fewer preemptions (2 vs 12)" in text


def test_the_recommendation_says_when_nothing_beats_it() -> None:
    summaries = [policy_summary("a", 100), policy_summary("b", 200)]
    assert "No other deployable policy beats it" in recommend(summaries)
    assert "only deployable policy" in recommend([policy_summary("a", 100)])


def test_ties_on_average_jct_go_to_the_lower_p99() -> None:
    summaries = [policy_summary("x", 100, p99=500), policy_summary("y", 100, p99=300)]
    assert best_deployable(summaries) is summaries[1]


# ---- ties ----------------------------------------------------------------------------


def test_an_exact_tie_is_reported_and_nothing_is_recommended() -> None:
    """One run per policy measures no spread: equal average JCTs tie, even if p99 differs."""
    summaries = [
        policy_summary("default", 1500, p99=4000),
        policy_summary("fifo", 1500, p99=9000),
        policy_summary("srtf", 900, oracle=True),
    ]
    text = recommend(summaries)
    assert text == (
        "Tie: default and fifo have the same average JCT (1,500.0 s), so none is recommended."
    )
    assert "Recommended" not in text


def test_a_difference_the_noise_covers_is_a_tie_and_one_beyond_it_is_not() -> None:
    summaries = [policy_summary("default", 1500), policy_summary("fifo", 1510)]
    assert recommend(summaries).startswith("Recommended: default.")  # 10 s apart, no noise
    assert recommend(summaries, noise=12.0).startswith(
        "Tie: default and fifo have average JCTs within the run-to-run spread"
    )
    assert recommend(summaries, noise=9.9).startswith("Recommended: default.")
