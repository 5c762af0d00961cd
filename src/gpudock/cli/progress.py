"""The one-line progress display of ``gpudock simulate`` on a terminal's stderr.

The simulator calls ``ProgressLine.update`` (``gpudock.sim.engine.Progress``) every
quarter second of wall time; the line is redrawn in place (``\\r``) and cleared when
the replay ends. Plain text, no rich: the engine knows nothing of the terminal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from gpudock.sim.engine import Progress

BAR = 24


def clock(seconds: float) -> str:
    """``3d04h``, ``2h05m``, ``4m09s``, ``12s``: two units at most."""
    s = int(max(seconds, 0))
    days, hours, minutes = s // 86400, s // 3600 % 24, s // 60 % 60
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{s % 60:02d}s"
    return f"{s}s"


def line(label: str, p: Progress) -> str:
    """``fifo [#####-----]  1,204/5,000 jobs  sim 3d04h  wall 12s  left ~38s``.

    The time left is the wall time so far scaled by the jobs still to finish (unknown,
    ``?``, until the first job finishes)."""
    fraction = p.finished / p.total if p.total else 1.0
    filled = int(fraction * BAR)
    left = "?" if not p.finished else "~" + clock(p.wall * (p.total - p.finished) / p.finished)
    return (
        f"{label} [{'#' * filled}{'-' * (BAR - filled)}] {p.finished:,}/{p.total:,} jobs"
        f"  sim {clock(p.sim_time)}  wall {clock(p.wall)}  left {left}"
    )


class ProgressLine:
    """Redraws one status line on ``stream`` (a terminal) for the replay of ``label``."""

    def __init__(self, stream: TextIO, label: str) -> None:
        self.stream = stream
        self.label = label

    def update(self, progress: Progress) -> None:
        if progress.done:
            self.stream.write("\r\033[K")
        else:
            self.stream.write("\r\033[K" + line(self.label, progress))
        self.stream.flush()
