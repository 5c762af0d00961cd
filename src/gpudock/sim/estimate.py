"""Duration estimates from finished jobs, for the ``default`` policy (no oracle).

``RemainingEstimator`` learns, per class of job (its queue and GPU count),
the run times of the jobs that finished. For a job that has already run
``a`` seconds it predicts the *expected remaining time*
``E[D - a | D > a]`` over that empirical distribution: a job that has
outlived most of its peers is expected to run long (heavy tails), one that
just started is expected to be as short as its peers usually are. This is
the Gittins-index idea behind least-attained-service schedulers (Tiresias)
made explicit, with per-queue histories as Helios's QSSF suggests.

Classes with too little history fall back to the history of all jobs of
that GPU count, then to all jobs; with no history at all the estimate is
the attained time itself (least attained service). Only finished jobs are
read: the estimator never sees a job's true duration before it ends.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

MIN_HISTORY = 20  # finished jobs a class needs before its own history is used
_REBUILD = 64  # inserts between suffix-sum rebuilds


def gpu_bucket(gpus: float) -> int:
    """1, 2, 4, 8, 16+ GPUs: classes that behave alike."""
    for bound in (1, 2, 4, 8):
        if gpus <= bound:
            return bound
    return 16


@dataclass(slots=True)
class _History:
    """Sorted run times, with suffix sums rebuilt lazily."""

    durations: list[float] = field(default_factory=list)
    suffix: list[float] = field(default_factory=list)  # suffix[i] = sum(durations[i:])
    stale: int = 0

    def add(self, duration: float) -> None:
        bisect.insort(self.durations, duration)
        self.stale += 1

    def expected_remaining(self, attained: float) -> float | None:
        """``E[D - a | D > a]``; None when no recorded run outlasted ``attained``."""
        if self.stale >= _REBUILD or len(self.suffix) != len(self.durations) + 1:
            total = 0.0
            suffix = [0.0] * (len(self.durations) + 1)
            for i in range(len(self.durations) - 1, -1, -1):
                total += self.durations[i]
                suffix[i] = total
            self.suffix, self.stale = suffix, 0
        i = bisect.bisect_right(self.durations, attained)
        count = len(self.durations) - i
        if count == 0:
            return None
        return self.suffix[i] / count - attained


class RemainingEstimator:
    """Expected remaining run time of a job, from finished jobs only (module doc)."""

    def __init__(self, min_history: int = MIN_HISTORY) -> None:
        self._min = min_history
        self._by_class: dict[tuple[str, int], _History] = {}
        self._by_gpus: dict[int, _History] = {}
        self._all = _History()

    def record(self, queue: str, gpus: float, duration: float) -> None:
        """A job of ``queue`` using ``gpus`` GPUs finished after running ``duration`` seconds."""
        bucket = gpu_bucket(gpus)
        self._by_class.setdefault((queue, bucket), _History()).add(duration)
        self._by_gpus.setdefault(bucket, _History()).add(duration)
        self._all.add(duration)

    def remaining(self, queue: str, gpus: float, attained: float) -> float:
        """Expected seconds left for a job that has run ``attained`` seconds."""
        bucket = gpu_bucket(gpus)
        for history in (self._by_class.get((queue, bucket)), self._by_gpus.get(bucket), self._all):
            if history is None or len(history.durations) < self._min:
                continue
            estimate = history.expected_remaining(attained)
            if estimate is not None:
                return estimate
        return max(attained, 1.0)  # nothing known: least attained service
