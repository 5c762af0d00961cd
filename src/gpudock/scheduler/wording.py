"""Words shared by pending reasons: GPU ranges, start times and preemption's victims.

Pure functions of their arguments (no clock): a time is formatted in the
local time zone of the process (the server's), from the epoch seconds the
snapshot carries.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence

from gpudock.core.units import format_duration
from gpudock.scheduler.snapshot import RunningJob

UNKNOWN_START = "when running jobs end"


def gpu_ranges(indices: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``"0-3, 6"`` (sorted, distinct; ASCII hyphens)."""
    runs: list[list[int]] = []
    for i in sorted(set(indices)):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def gpus_of(indices: Iterable[int], node: str) -> str:
    """``"GPUs 0-3 of gpu-0 are"`` or ``"GPU 2 of gpu-0 is"``."""
    listed = sorted(set(indices))
    if len(listed) == 1:
        return f"GPU {listed[0]} of {node} is"
    return f"GPUs {gpu_ranges(listed)} of {node} are"


def clock(at: float, now: float) -> str:
    """``at`` in server-local time: ``"14:05"`` the same day as ``now``, else ``"Dec 04 14:05"``."""
    when, today = time.localtime(at), time.localtime(now)
    if (when.tm_year, when.tm_yday) == (today.tm_year, today.tm_yday):
        return time.strftime("%H:%M", when)
    return time.strftime("%b %d %H:%M", when)


def expected_start(start: float, now: float) -> str:
    """``"expected to start ≈ 14:05, in 43m20s"``, or ``"expected to start when running jobs
    end"`` when ``start`` is unknown (``math.inf``)."""
    if math.isinf(start):
        return f"expected to start {UNKNOWN_START}"
    return f"expected to start ≈ {clock(start, now)}, in {format_duration(max(0.0, start - now))}"


def victims_text(victims: Sequence[RunningJob]) -> str:
    """``"jobs 4, 7 (priority 0, 2)"`` or ``"job 4 (priority 0)"``: preemption's victims."""
    ids = ", ".join(str(v.id) for v in sorted(victims, key=lambda v: v.id))
    priorities = sorted({v.priority for v in victims})
    label = "job" if len(victims) == 1 else "jobs"
    return f"{label} {ids} (priority {', '.join(map(str, priorities))})"
