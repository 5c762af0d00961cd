"""Figures from simulated runs: what ``gpudock simulate --json`` prints.

Everything here is a pure function of ``RunRecord``s (or of the summaries
made from them): no I/O, no plotting, no clock. ``report.py`` draws and
writes what these functions compute.

Definitions used throughout:

* **window**: ``[first submission, last completion]`` of a run (see
  ``observation_window``); makespan, utilization and queue shares are all
  measured over it, so they describe the same stretch of virtual time.
* **percentiles**: nearest-rank (``percentile``): always a JCT some job had.
* **fairness gap**: the largest ``|share_received - share_entitled|`` over the
  queues that declare an entitlement, in fractions of the cluster
  (``fairness_gap``); 0 means every queue got exactly its entitlement.

Seconds are rounded to 1 decimal, fractions to 4, ``sim_seconds`` (wall clock)
to 3. Averages over nothing are None, never a ZeroDivisionError.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence

from gpudock.sim.results import JobRecord, RunRecord
from gpudock.sim.ties import tie_sentence, tied_with

Point = tuple[float, float]

# The least gain worth mentioning as a trade-off: one percentage point of the cluster.
FAIRNESS_MARGIN = 0.01


class StepFunction:
    """A step function given as ``(time, value)`` points.

    Each value holds from its time until the next point's time; before the
    first point the value is 0, after the last point the last value holds.
    Points need not be sorted; of several points at one time the one given
    last wins. Building is O(n log n), ``integral`` and ``average`` O(log n).
    """

    __slots__ = ("_areas", "_times", "_values")

    def __init__(self, points: Iterable[Point]) -> None:
        ordered = sorted(points, key=lambda point: point[0])  # stable: later ties win
        self._times = [time for time, _ in ordered]
        self._values = [value for _, value in ordered]
        self._areas = [0.0]  # integral from the first point up to each point
        for i in range(1, len(ordered)):
            width = self._times[i] - self._times[i - 1]
            self._areas.append(self._areas[-1] + self._values[i - 1] * width)

    def integral(self, t: float) -> float:
        """The area under the function from its first point up to ``t``."""
        i = bisect.bisect_right(self._times, t) - 1
        if i < 0:
            return 0.0
        return self._areas[i] + self._values[i] * (t - self._times[i])

    def average(self, start: float, end: float) -> float:
        """The time-average over ``[start, end]``; raises ValueError unless ``end > start``."""
        if not end > start:
            raise ValueError(f"empty interval [{start}, {end}]")
        return (self.integral(end) - self.integral(start)) / (end - start)


def step_average(points: Iterable[Point], start: float, end: float) -> float:
    """Time-average of the step function ``points`` over ``[start, end]``.

    Same conventions as ``StepFunction`` (0 before the first point, the last
    value holds). Raises ValueError unless ``end > start``.
    """
    return StepFunction(points).average(start, end)


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """The nearest-rank ``p``-th percentile (0 < p <= 100) of ascending values.

    Returns the value at rank ``ceil(p/100 * n)`` (1-based), so always one of
    the values; None for no values.
    """
    if not 0 < p <= 100:
        raise ValueError(f"percentile {p} is outside (0, 100]")
    if not sorted_values:
        return None
    rank = math.ceil(round(p * len(sorted_values) / 100, 9))
    return sorted_values[max(rank, 1) - 1]


def observation_window(run: RunRecord) -> tuple[float, float] | None:
    """``(first submission, last completion)``, or None if no job finished.

    Also None when the window has no length (nothing to average over).
    """
    ends = [job.end for job in run.jobs if job.end is not None]
    if not ends:
        return None
    start, end = min(job.submit for job in run.jobs), max(ends)
    return (start, end) if end > start else None


def summarize(run: RunRecord) -> dict[str, object]:
    """The JSON-ready figures of one run (keys as in ``gpudock simulate --json``).

    ``jobs`` counts finished jobs and JCT figures cover only them;
    ``avg_queue_delay_s`` covers every job that started; ``unfinished``
    counts replayed jobs that had not completed when the run ended.
    ``gpu_utilization`` and each queue's ``share_received`` are time-averages
    over the window (see the module docstring) divided by ``total_gpus``;
    None when no job finished. ``per_queue`` lists every queue that had a job,
    a share series or an entitlement, sorted by name.
    """
    finished = [job for job in run.jobs if job.end is not None]
    jcts = sorted(_jcts(run.jobs))
    window = observation_window(run)
    return {
        "policy": run.policy,
        "description": run.description,
        "oracle": run.oracle,
        "jobs": len(finished),
        "unfinished": len(run.jobs) - len(finished),
        "skipped_jobs": run.skipped_jobs,
        "refused": {why: len(ids) for why, ids in sorted(run.refused.items())},
        "avg_jct_s": _round(_mean(jcts), 1),
        "p50_jct_s": _round(percentile(jcts, 50), 1),
        "p99_jct_s": _round(percentile(jcts, 99), 1),
        "avg_queue_delay_s": _round(_mean(_queue_delays(run.jobs)), 1),
        "makespan_s": None if window is None else _round(window[1] - window[0], 1),
        "gpu_utilization": _round(_share(run.utilization, window, run.total_gpus), 4),
        "preemptions": run.preemptions,
        "cycles": run.cycles,
        "sim_seconds": round(run.sim_seconds, 3),
        "per_queue": _per_queue(run, window),
    }


def compare(runs: Sequence[RunRecord]) -> list[dict[str, object]]:
    """One ``summarize`` object per run, in the order given (the --json output)."""
    return [summarize(run) for run in runs]


def jct_cdf(run: RunRecord) -> tuple[list[float], list[float]]:
    """Points of the JCT CDF: ascending JCTs and, for each, the fraction of
    *all* replayed jobs finished within it.

    Unfinished jobs count in the denominator, so the curve tops out at the
    finished fraction rather than pretending they do not exist.
    """
    jcts = sorted(_jcts(run.jobs))
    total = len(run.jobs)
    return jcts, [(rank + 1) / total for rank in range(len(jcts))]


def queue_delay_over_time(run: RunRecord, bins: int) -> list[tuple[float, float | None]]:
    """Average queue delay by submission time: ``(slice midpoint, average)``.

    ``[first, last submission]`` is cut into ``bins`` equal slices; each job
    falls into the slice of its submission. Jobs that never started are left
    out (``summarize`` counts them as unfinished); a slice with no started job
    gives None. One point when all jobs share a submission time, [] for a run
    without jobs.
    """
    if bins < 1:
        raise ValueError("bins must be at least 1")
    if not run.jobs:
        return []
    first = min(job.submit for job in run.jobs)
    width = (max(job.submit for job in run.jobs) - first) / bins
    if width <= 0:
        return [(first, _mean(_queue_delays(run.jobs)))]
    sums, counts = [0.0] * bins, [0] * bins
    for job in run.jobs:
        if job.start is not None:
            index = min(int((job.submit - first) / width), bins - 1)
            sums[index] += job.start - job.submit
            counts[index] += 1
    return [
        (first + (i + 0.5) * width, sums[i] / counts[i] if counts[i] else None) for i in range(bins)
    ]


def utilization_over_time(run: RunRecord, bins: int) -> list[tuple[float, float]]:
    """GPU utilization (fraction of ``total_gpus``) averaged over ``bins``
    equal slices of the window: ``(slice midpoint, fraction)``.

    [] when the run has no window or no GPUs.
    """
    if bins < 1:
        raise ValueError("bins must be at least 1")
    window = observation_window(run)
    if window is None or run.total_gpus <= 0:
        return []
    step = StepFunction(run.utilization)
    start, width = window[0], (window[1] - window[0]) / bins
    points = []
    for i in range(bins):
        low, high = start + i * width, start + (i + 1) * width
        points.append((low + width / 2, step.average(low, high) / run.total_gpus))
    return points


def fairness_gap(summary: Mapping[str, object]) -> float | None:
    """The largest ``|share_received - share_entitled|`` over a summary's queues.

    Only queues with both figures count; None when there are none. Lower is
    fairer; it is a fraction of the cluster.
    """
    per_queue = summary.get("per_queue")
    if not isinstance(per_queue, Mapping):
        return None
    gaps = []
    for figures in per_queue.values():
        if isinstance(figures, Mapping):
            received = _number(figures, "share_received")
            entitled = _number(figures, "share_entitled")
            if received is not None and entitled is not None:
                gaps.append(abs(received - entitled))
    return round(max(gaps), 4) if gaps else None


def best_deployable(summaries: Sequence[Mapping[str, object]]) -> Mapping[str, object] | None:
    """The non-oracle summary with the lowest average JCT (ties: lower p99,
    then name); None if no deployable policy finished a job. Never an oracle.
    """
    candidates = [
        summary
        for summary in summaries
        if summary.get("oracle") is not True and _number(summary, "avg_jct_s") is not None
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
    ratio to the best oracle, p50/p99, preemptions, utilization, unfinished
    jobs) and names the deployable policies that beat it on p99 JCT, fairness
    gap (by at least ``FAIRNESS_MARGIN``), unfinished jobs or preemptions.
    Never recommends an oracle. The text is not HTML-escaped.
    """
    best = best_deployable(summaries)
    if best is None:
        return "No deployable (non-oracle) policy finished any job, so none is recommended."
    name = str(best.get("policy"))
    deployable = [s for s in summaries if s.get("oracle") is not True]
    tied = tied_with(best, [s for s in deployable if s is not best], noise)
    if tied:
        return tie_sentence(best, tied, noise)
    avg = _number(best, "avg_jct_s") or 0.0
    if len(deployable) == 1:
        lead = f"It is the only deployable policy simulated (average JCT {_secs(avg)}"
    else:
        lead = (
            f"It has the lowest average JCT of the {len(deployable)} deployable "
            f"policies ({_secs(avg)}"
        )
    sentences = [f"Recommended: {name}.", lead + _oracle_ratio(avg, summaries) + ")."]
    sentences.append(_profile(best))
    sentences.append(_tradeoffs(best, [s for s in deployable if s is not best]))
    return " ".join(sentences)


# ---- helpers --------------------------------------------------------------


def _jcts(jobs: Iterable[JobRecord]) -> list[float]:
    return [job.end - job.submit for job in jobs if job.end is not None]


def _queue_delays(jobs: Iterable[JobRecord]) -> list[float]:
    return [job.start - job.submit for job in jobs if job.start is not None]


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _share(
    points: Sequence[Point], window: tuple[float, float] | None, total_gpus: float
) -> float | None:
    """Time-averaged value of ``points`` over ``window`` as a fraction of ``total_gpus``."""
    if window is None or total_gpus <= 0:
        return None
    return step_average(points, *window) / total_gpus


def _per_queue(run: RunRecord, window: tuple[float, float] | None) -> dict[str, object]:
    by_queue: dict[str, list[JobRecord]] = {}
    for job in run.jobs:
        by_queue.setdefault(job.queue, []).append(job)
    names = sorted(set(by_queue) | set(run.queue_share) | set(run.entitled))
    result: dict[str, object] = {}
    for queue in names:
        jobs = by_queue.get(queue, [])
        entitled = run.entitled.get(queue)
        result[queue] = {
            "jobs": sum(1 for job in jobs if job.end is not None),
            "avg_jct_s": _round(_mean(_jcts(jobs)), 1),
            "avg_queue_delay_s": _round(_mean(_queue_delays(jobs)), 1),
            "share_received": _round(
                _share(run.queue_share.get(queue, []), window, run.total_gpus), 4
            ),
            "share_entitled": _round(entitled, 4),
        }
    return result


def _number(summary: Mapping[str, object], key: str) -> float | None:
    value = summary.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _jct_rank(summary: Mapping[str, object]) -> tuple[float, float, str]:
    p99 = _number(summary, "p99_jct_s")
    return (
        _number(summary, "avg_jct_s") or 0.0,
        math.inf if p99 is None else p99,
        str(summary.get("policy")),
    )


def _secs(seconds: float) -> str:
    return f"{seconds:,.0f} s" if abs(seconds) >= 100 else f"{seconds:,.1f} s"


def _oracle_ratio(avg: float, summaries: Sequence[Mapping[str, object]]) -> str:
    """``"; 1.09x the srtf oracle's 13,950 s"`` for the best oracle, or ``""``."""
    oracles = [
        s for s in summaries if s.get("oracle") is True and _number(s, "avg_jct_s") is not None
    ]
    if not oracles:
        return ""
    oracle = min(oracles, key=_jct_rank)
    oracle_avg = _number(oracle, "avg_jct_s") or 0.0
    if oracle_avg <= 0:
        return ""
    return f"; {avg / oracle_avg:.2f}x the {oracle.get('policy')} oracle's {_secs(oracle_avg)}"


def _profile(best: Mapping[str, object]) -> str:
    parts = []
    p50, p99 = _number(best, "p50_jct_s"), _number(best, "p99_jct_s")
    if p50 is not None and p99 is not None:
        parts.append(f"its p50/p99 JCT are {_secs(p50)} / {_secs(p99)}")
    parts.append(f"it preempted {int(_number(best, 'preemptions') or 0):,} times")
    utilization = _number(best, "gpu_utilization")
    if utilization is not None:
        parts.append(f"it kept {utilization:.1%} of the GPUs allocated")
    unfinished = int(_number(best, "unfinished") or 0)
    if unfinished:
        parts.append(f"{unfinished:,} of its jobs did not finish (they are not in the JCTs)")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


def _tradeoffs(best: Mapping[str, object], others: Sequence[Mapping[str, object]]) -> str:
    notes = []
    for label, get, margin, unit in (
        ("a lower p99 JCT", lambda s: _number(s, "p99_jct_s"), 0.0, _secs),
        ("a smaller fairness gap", fairness_gap, FAIRNESS_MARGIN, _frac),
        ("fewer unfinished jobs", lambda s: _number(s, "unfinished"), 0.0, _count),
        ("fewer preemptions", lambda s: _number(s, "preemptions"), 0.0, _count),
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
            "unfinished jobs or preemptions."
        )
    return "Trade-offs: " + "; ".join(notes) + "."


def _frac(value: float) -> str:
    return f"{value:.1%}"


def _count(value: float) -> str:
    return f"{int(value):,}"
