"""``gpudock simulate`` shows its progress on a terminal's stderr, and only there.

The engine reports through a callback (``simulate(..., progress=fn)``), and draws
nothing itself; the CLI draws one line, redrawn in place and cleared at the end.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import pytest

from gpudock.cli.progress import clock, line
from gpudock.sim import engine
from gpudock.sim.cluster import parse_cluster
from gpudock.sim.engine import Progress, SimConfig, simulate
from gpudock.sim.policies import POLICIES
from gpudock.sim.traces import load_trace

SAMPLE = Path(__file__).resolve().parents[3] / "traces" / "sample.csv"
ARGS = ["simulate", "--trace", str(SAMPLE), "--cluster", "8x8", "--policy", "fifo"]
BAR = re.compile(r"fifo \[[#-]{24}\] [\d,]+/400 jobs  sim \S+  wall \S+  left \S+")


def test_the_engine_reports_from_start_to_done(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "PROGRESS_EVERY", 0.0)  # every 256 event times
    seen: list[Progress] = []
    jobs = load_trace(SAMPLE, "canonical").jobs

    record = simulate(jobs, parse_cluster("8x8"), POLICIES["fifo"], SimConfig(), seen.append)

    assert seen[0] == Progress(0.0, 0, 400, 0.0)
    assert len(seen) > 2 and seen[-1].done and not any(p.done for p in seen[:-1])
    assert seen[-1].finished == seen[-1].total == len(record.jobs) == 400
    assert seen[-1].sim_time == record.horizon
    for before, after in pairwise(seen):
        assert before.finished <= after.finished and before.sim_time <= after.sim_time


def test_the_line_says_jobs_finished_sim_and_wall_time_and_time_left() -> None:
    assert line("fifo", Progress(7200.0, 100, 400, 30.0)) == (
        "fifo [######------------------] 100/400 jobs  sim 2h00m  wall 30s  left ~1m30s"
    )
    assert line("x", Progress(0.0, 0, 400, 0.0)).endswith("0/400 jobs  sim 0s  wall 0s  left ?")
    assert [clock(s) for s in (5, 65, 3700, 200000)] == ["5s", "1m05s", "1h01m", "2d07h"]


def run_with_tty_stderr(*args: str) -> tuple[int, str]:
    """``gpudock ARGS`` with stderr on a pseudo-terminal: exit code and what it showed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpudock.cli.main", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    shown = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    return proc.wait(timeout=300), shown.decode(errors="replace")


def test_a_terminal_sees_the_progress_line_then_it_is_cleared() -> None:
    code, shown = run_with_tty_stderr(*ARGS)

    assert code == 0, shown
    assert BAR.search(shown), shown
    assert "fifo [------------------------] 0/400 jobs" in shown
    assert shown.rstrip("\r\n").endswith("\r\x1b[K")  # the last draw clears the line


def test_quiet_turns_it_off_on_a_terminal() -> None:
    code, shown = run_with_tty_stderr(*ARGS, "--quiet")

    assert code == 0, shown
    assert " jobs  sim " not in shown and "\x1b[K" not in shown


def test_no_progress_line_when_stderr_is_not_a_terminal() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gpudock.cli.main", *ARGS],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr
    assert " jobs  sim " not in done.stderr and "\x1b[K" not in done.stderr
    cost, progress = done.stderr.splitlines(keepends=True)
    assert cost.startswith("each restart costs 1m00s of work redone")
    assert progress == "simulating fifo on 400 jobs ...\n"
