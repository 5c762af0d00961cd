"""The sample trace in the repository: what its generator writes, and the README's example."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from gpudock.cli import main as cli
from gpudock.sim.traces import detect_format, load_trace

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "traces" / "sample.csv"


def test_the_generator_writes_exactly_the_file_in_the_repository() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_sample_trace.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 0, done.stdout + done.stderr


def test_it_loads_as_a_canonical_trace_of_400_jobs() -> None:
    trace = load_trace(SAMPLE, detect_format(SAMPLE))

    assert detect_format(SAMPLE) == "canonical"
    assert len(trace.jobs) == 400 and not trace.skipped
    assert {j.queue for j in trace.jobs} == {"research", "prod", "interns"}
    assert any(j.gpu_fraction for j in trace.jobs)  # shares
    assert max(j.num_gpus for j in trace.jobs) == 16  # gangs on 8-GPU nodes
    assert trace.jobs[-1].submit_time <= 12 * 3600


def test_the_readme_example_finishes_every_job_under_each_policy() -> None:
    result = CliRunner().invoke(
        cli.app,
        ["simulate", "--trace", str(SAMPLE), "--cluster", "4x8", "--json",
         "--policy", "fifo", "--policy", "fair-share", "--policy", "default"],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)
    assert [f["policy"] for f in figures] == ["fifo", "fair-share", "default"]
    assert all(f["jobs"] == 400 and f["unfinished"] == 0 for f in figures)
