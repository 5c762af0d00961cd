"""``gpudock show`` says whether a job that holds GPUs is protected from preemption, and until
when, and what a preemption would charge it (``JobDetailOut.preemption``)."""

from __future__ import annotations

import time

from gpudock.cli.render import preemption_text


def test_a_protected_job_says_until_when_and_how_long_is_left() -> None:
    until = 1_796_013_042.0
    text = preemption_text(
        {"preemptible": True, "protected_until": until, "restart_cost_s": 60.0, "lost_work_s": 0},
        now=until - 500,
    )
    when = time.strftime("%F %T", time.localtime(until))
    assert text == f"protected until {when} (8m20s left); a restart costs 1m00s"


def test_an_unprotected_job_says_what_a_restart_would_lose() -> None:
    figures = {"preemptible": True, "protected_until": None, "restart_cost_s": 360.0}
    text = preemption_text({**figures, "lost_work_s": 300.0})
    assert text == "not protected; a restart costs 6m00s (of which 5m00s since its checkpoint)"


def test_a_job_that_is_never_preempted_says_so() -> None:
    figures = {"preemptible": False, "protected_until": None, "restart_cost_s": 0.0}
    assert preemption_text(figures) == "never (preemptible: false)"
