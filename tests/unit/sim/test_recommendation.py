"""The recommendation weighs what restarts cost: the GPU time they lost, and the restart
cost at which the recommended policy's lead over one that preempts less would be gone."""

from __future__ import annotations

from gpudock.sim.recommendation import break_even, recommend


def summary(policy: str, avg: float, per_job: float, lost_share: float, **extra: object) -> dict:
    return {
        "policy": policy,
        "oracle": False,
        "avg_jct_s": avg,
        "p50_jct_s": avg / 2,
        "p99_jct_s": avg * 5,
        "unfinished": 0,
        "gpu_utilization": 0.8,
        "preemptions": int(per_job * 400),
        "preemptions_per_job": per_job,
        "lost_gpu_hours": lost_share * 1000,
        "lost_gpu_share": lost_share,
        "restart_overhead_s": 60.0,
        "checkpoint_interval_s": None,
        **extra,
    }


# eager leads by 150 s and preempts 1.5 more times per job than calm: each more second of
# restart adds 1.5 s to eager's average JCT, so calm catches up 100 s later, at 160 s
EAGER = summary("eager", 1000.0, 2.0, 0.05)
CALM = summary("calm", 1150.0, 0.5, 0.01)


def test_the_lead_is_gone_where_the_jct_gap_is_spent_on_extra_restarts() -> None:
    assert break_even(EAGER, CALM) == 60.0 + 150.0 / 1.5


def test_no_break_even_against_a_rival_that_preempts_as_much_or_is_ahead() -> None:
    assert break_even(EAGER, summary("busy", 1200.0, 2.5, 0.06)) is None
    assert break_even(CALM, EAGER) is None  # eager is ahead: nothing to lose


def test_the_text_gives_the_gpu_time_lost_and_where_the_lead_would_be_gone() -> None:
    text = recommend([EAGER, CALM])
    assert text.startswith("Recommended: eager.")
    assert "it preempted 800 times (2.00 per job), losing 50.0 GPU-hours (5.0% of" in text
    assert "at 1m00s of work redone per restart" in text
    assert "calm has less GPU time lost to restarts (1.0% vs 5.0%)" in text
    assert "At a restart overhead above about 2m40s (this run: 1m00s), its lead over calm" in text
    assert "rerun with --restart-overhead 2m40s to measure it" in text


def test_a_lead_no_restart_cost_can_take_away_is_said_so() -> None:
    text = recommend([CALM, summary("slow", 1500.0, 1.0, 0.02)])
    assert "No rival preempts less per job" in text


def test_a_checkpoint_interval_is_part_of_what_a_restart_costs() -> None:
    text = recommend([summary("ckpt", 900.0, 1.0, 0.01, checkpoint_interval_s=1800.0)])
    assert "plus the run since its last checkpoint (every 30m00s)" in text
