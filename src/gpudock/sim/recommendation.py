"""The recommendation ``gpudock simulate`` prints and its report shows: one deployable
policy, backed by its figures, its trade-offs, and what its restarts cost.

Pure functions of the summaries ``metrics.summarize`` makes. The runs already paid
the restart cost they assumed (``restart_overhead_s``, ``checkpoint_interval_s``): a
policy that preempts a lot has a worse average JCT for it. On top of that the
recommendation weighs the GPU time restarts lost, and says at what restart cost
the recommended policy's lead over a rival that restarts fewer jobs would be gone:
a first-order estimate (each restart adds its cost to its job's completion, so the
average JCT grows by preemptions per job times the added cost; the queueing that
restarts cause makes the real point come sooner). A rerun with
``--restart-overhead`` at that cost measures it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from gpudock.core.units import format_duration
from gpudock.sim.metrics import fairness_gap, number
from gpudock.sim.ties import tie_sentence, tied_with

__all__ = ["FAIRNESS_MARGIN", "LOST_MARGIN", "best_deployable", "break_even", "recommend"]

# The least gain worth mentioning as a trade-off: one percentage point of the cluster.
FAIRNESS_MARGIN = 0.01
# ... and of the GPU time jobs held, for the GPU time lost to restarts.
LOST_MARGIN = 0.01


def best_deployable(summaries: Sequence[Mapping[str, object]]) -> Mapping[str, object] | None:
    """The non-oracle summary with the lowest average JCT (ties: lower p99,
    then name); None if no deployable policy finished a job. Never an oracle.
    """
    candidates = [
        summary
        for summary in summaries
        if summary.get("oracle") is not True and number(summary, "avg_jct_s") is not None
    ]
    if not candidates:
        return None
    return min(candidates, key=_jct_rank)


def recommend(summaries: Sequence[Mapping[str, object]], noise: float = 0.0) -> str:
    """A few plain-text sentences recommending one deployable policy, or a tie.

    When other deployable policies tie with ``best_deployable`` on average
    JCT (within ``noise``, the run-to-run spread the caller measured; 0 for
    single runs: exactly equal), it reports the tie and recommends none
    (``ties.py``).

    Picks ``best_deployable``, backs it with its numbers (average JCT, the
    ratio to the best oracle, p50/p99, preemptions per job and the GPU time they
    lost, utilization, unfinished jobs), names the deployable policies that beat
    it on p99 JCT, fairness gap (by at least ``FAIRNESS_MARGIN``), unfinished
    jobs, preemptions or GPU time lost to restarts (by ``LOST_MARGIN``), and says
    at what restart overhead its lead over a rival that preempts less would be
    gone (``break_even``). Never recommends an oracle. The text is not HTML-escaped.
    """
    best = best_deployable(summaries)
    if best is None:
        return "No deployable (non-oracle) policy finished any job, so none is recommended."
    name = str(best.get("policy"))
    deployable = [s for s in summaries if s.get("oracle") is not True]
    tied = tied_with(best, [s for s in deployable if s is not best], noise)
    if tied:
        return tie_sentence(best, tied, noise)
    avg = number(best, "avg_jct_s") or 0.0
    if len(deployable) == 1:
        lead = f"It is the only deployable policy simulated (average JCT {_secs(avg)}"
    else:
        lead = (
            f"It has the lowest average JCT of the {len(deployable)} deployable "
            f"policies ({_secs(avg)}"
        )
    others = [s for s in deployable if s is not best]
    sentences = [f"Recommended: {name}.", lead + _oracle_ratio(avg, summaries) + ")."]
    sentences.append(_profile(best))
    sentences.append(_tradeoffs(best, others))
    sentences.append(_higher_cost(best, others))
    return " ".join(s for s in sentences if s)


def break_even(best: Mapping[str, object], rival: Mapping[str, object]) -> float | None:
    """The restart overhead (seconds) at which ``rival`` would catch up with ``best`` on
    average JCT, to first order (module doc): the overhead both ran at, plus their JCT
    gap over how many more preemptions per job ``best`` makes. None when ``rival`` is
    not behind, does not preempt less, or a figure is missing."""
    mine, theirs = number(best, "avg_jct_s"), number(rival, "avg_jct_s")
    more = number(best, "preemptions_per_job"), number(rival, "preemptions_per_job")
    overhead = number(best, "restart_overhead_s")
    if mine is None or theirs is None or None in more or overhead is None:
        return None
    extra = (more[0] or 0.0) - (more[1] or 0.0)
    if theirs <= mine or extra <= 0.0:
        return None
    return overhead + (theirs - mine) / extra


def _higher_cost(best: Mapping[str, object], others: Sequence[Mapping[str, object]]) -> str:
    """Where a higher restart cost would take the lead away (``break_even``), if anywhere."""
    overhead = number(best, "restart_overhead_s")
    if overhead is None or not others:
        return ""
    points = [(cost, s) for s in others if (cost := break_even(best, s)) is not None]
    if not points:
        return (
            "No rival preempts less per job, so a higher restart cost is not expected to "
            "take its lead away."
        )
    cost, rival = min(points, key=lambda pair: pair[0])
    gap = (number(rival, "avg_jct_s") or 0.0) - (number(best, "avg_jct_s") or 0.0)
    extra = (number(best, "preemptions_per_job") or 0.0) - (
        number(rival, "preemptions_per_job") or 0.0
    )
    return (
        f"At a restart overhead above about {_duration(cost)} (this run: "
        f"{_duration(overhead)}), its lead over {rival.get('policy')} ({_secs(gap)}) would be "
        f"gone: it preempts {extra:.2f} more times per job (a first-order estimate; "
        f"rerun with --restart-overhead {_duration(cost)} to measure it)."
    )


# ---- helpers


def _jct_rank(summary: Mapping[str, object]) -> tuple[float, float, str]:
    p99 = number(summary, "p99_jct_s")
    return (
        number(summary, "avg_jct_s") or 0.0,
        math.inf if p99 is None else p99,
        str(summary.get("policy")),
    )


def _secs(seconds: float) -> str:
    return f"{seconds:,.0f} s" if abs(seconds) >= 100 else f"{seconds:,.1f} s"


def _oracle_ratio(avg: float, summaries: Sequence[Mapping[str, object]]) -> str:
    """``"; 1.09x the srtf oracle's 13,950 s"`` for the best oracle, or ``""``."""
    oracles = [
        s for s in summaries if s.get("oracle") is True and number(s, "avg_jct_s") is not None
    ]
    if not oracles:
        return ""
    oracle = min(oracles, key=_jct_rank)
    oracle_avg = number(oracle, "avg_jct_s") or 0.0
    if oracle_avg <= 0:
        return ""
    return f"; {avg / oracle_avg:.2f}x the {oracle.get('policy')} oracle's {_secs(oracle_avg)}"


def _profile(best: Mapping[str, object]) -> str:
    parts = []
    p50, p99 = number(best, "p50_jct_s"), number(best, "p99_jct_s")
    if p50 is not None and p99 is not None:
        parts.append(f"its p50/p99 JCT are {_secs(p50)} / {_secs(p99)}")
    parts.append(_restarts(best))
    utilization = number(best, "gpu_utilization")
    if utilization is not None:
        parts.append(f"it kept {utilization:.1%} of the GPUs allocated")
    unfinished = int(number(best, "unfinished") or 0)
    if unfinished:
        parts.append(f"{unfinished:,} of its jobs did not finish (they are not in the JCTs)")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def _restarts(best: Mapping[str, object]) -> str:
    """``it preempted 1,240 times (3.10 per job), losing 5.2 GPU-hours (0.4% of the GPU
    time its jobs held) at 1m00s of work redone per restart``."""
    text = f"it preempted {int(number(best, 'preemptions') or 0):,} times"
    per_job = number(best, "preemptions_per_job")
    if per_job is not None:
        text += f" ({per_job:.2f} per job)"
    lost, share = number(best, "lost_gpu_hours"), number(best, "lost_gpu_share")
    if lost is not None and share is not None:
        text += f", losing {lost:,.1f} GPU-hours ({share:.1%} of the GPU time its jobs held)"
    overhead = number(best, "restart_overhead_s")
    if overhead is not None:
        text += f" at {_duration(overhead)} of work redone per restart"
        interval = number(best, "checkpoint_interval_s")
        if interval is not None:
            text += f" plus the run since its last checkpoint (every {_duration(interval)})"
    return text


def _tradeoffs(best: Mapping[str, object], others: Sequence[Mapping[str, object]]) -> str:
    notes = []
    for label, get, margin, unit in (
        ("a lower p99 JCT", lambda s: number(s, "p99_jct_s"), 0.0, _secs),
        ("a smaller fairness gap", fairness_gap, FAIRNESS_MARGIN, _frac),
        ("fewer unfinished jobs", lambda s: number(s, "unfinished"), 0.0, _count),
        ("fewer preemptions", lambda s: number(s, "preemptions"), 0.0, _count),
        (
            "less GPU time lost to restarts",
            lambda s: number(s, "lost_gpu_share"),
            LOST_MARGIN,
            _frac,
        ),
    ):
        mine = get(best)
        rivals = [(value, s) for s in others if (value := get(s)) is not None]
        if mine is None or not rivals:
            continue
        value, rival = min(rivals, key=lambda pair: pair[0])
        if value < mine - margin:
            notes.append(f"{rival.get('policy')} has {label} ({unit(value)} vs {unit(mine)})")
    if not notes:
        if not others:
            return "There is no other deployable policy to trade off against."
        return (
            "No other deployable policy beats it on p99 JCT, fairness gap, "
            "unfinished jobs, preemptions or GPU time lost to restarts."
        )
    return "Trade-offs: " + "; ".join(notes) + "."


def _duration(seconds: float) -> str:
    """``1m00s``, ``45s``, ``2h05m`` (``format_duration``)."""
    return format_duration(seconds) if math.isfinite(seconds) else "unbounded"


def _frac(value: float) -> str:
    return f"{value:.1%}"


def _count(value: float) -> str:
    return f"{int(value):,}"
