"""``gpudock simulate``: JSON figures, the report folder, and one-line errors (exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from gpudock.cli import main as cli
from gpudock.cli import simulate_cmd
from gpudock.sim.report import PLOTS

TRACE = (
    "job_id,submit_time,duration,num_gpus,queue\n"
    "a,0,100,8,x\nb,10,50,8,x\nc,20,10,4,y\nd,20,10,4,y\n"
)
KEYS = {
    "jobs",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "avg_queue_delay_s",
    "makespan_s",
    "gpu_utilization",
    "preemptions",
    "per_queue",
}


@pytest.fixture(autouse=True)
def app(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register ``simulate`` once; a wide error console, so messages are checked whole."""
    if not any(c.name == "simulate" for c in cli.app.registered_commands):
        cli.register_server_command()
    monkeypatch.setattr(simulate_cmd, "err", Console(stderr=True, width=1000))


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(TRACE)
    return path


def simulate(*args: str | Path) -> Result:
    return CliRunner().invoke(cli.app, ["simulate", *map(str, args)])


def figures(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert isinstance(data, list)
    return data


def one_line_error(result: Result) -> str:
    """The single ``error:`` line of a failed run (exit 2, no traceback, nothing on stdout)."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


def test_json_prints_one_object_per_policy_with_exact_figures(trace: Path) -> None:
    data = figures(
        simulate("--trace", trace, "--cluster", "1x8", "--policy", "fifo", "--policy",
                 "srtf-oracle", "--json")
    )  # fmt: skip
    assert [d["policy"] for d in data] == ["fifo", "srtf-oracle"]
    for summary in data:
        assert set(summary) >= KEYS
        assert set(summary["per_queue"]) == {"x", "y"}
    fifo, srtf = data
    # fifo: a 0-100, b 100-150, c,d 150-160 (JCTs 100, 140, 140, 140)
    assert {key: fifo[key] for key in KEYS - {"per_queue"}} == {
        "jobs": 4,
        "avg_jct_s": 130.0,
        "p50_jct_s": 140.0,
        "p99_jct_s": 140.0,
        "avg_queue_delay_s": 87.5,
        "makespan_s": 160.0,
        "gpu_utilization": 1.0,
        "preemptions": 0,
    }
    # srtf: a 0-170 (preempted at 10), b 30-80, c,d 20-30 (JCTs 170, 70, 10, 10)
    assert {key: srtf[key] for key in KEYS - {"per_queue"}} == {
        "jobs": 4,
        "avg_jct_s": 65.0,
        "p50_jct_s": 10.0,
        "p99_jct_s": 170.0,
        "avg_queue_delay_s": 5.0,
        "makespan_s": 170.0,
        "gpu_utilization": 1.0,
        "preemptions": 1,
    }
    assert (fifo["oracle"], srtf["oracle"]) == (False, True)
    assert fifo["per_queue"]["y"] == {
        "jobs": 2,
        "avg_jct_s": 140.0,
        "avg_queue_delay_s": 130.0,
        "share_received": 0.0625,  # 8 GPUs for 10 s of 160
        "share_entitled": 0.5,
    }


def test_table_output_names_a_recommendation(trace: Path) -> None:
    result = simulate("--trace", trace, "--cluster", "1x8", "--policy", "fifo")
    assert result.exit_code == 0, result.output
    assert "fifo" in result.stdout
    assert "Recommended: fifo." in " ".join(result.stdout.split())


SUMMARY = {"jobs": 1000, "unfinished": 0, "avg_jct_s": 123456.7, "p50_jct_s": 3456.2,
           "p99_jct_s": 987654.3, "avg_queue_delay_s": 12345.6, "makespan_s": 9876543.2,
           "gpu_utilization": 0.8731, "preemptions": 12}  # fmt: skip
NUMBERS = ("1000", "123,457", "3,456", "987,654", "12,346", "9,876,543", "0.8731", "12")


@pytest.mark.parametrize("width", [200, 80, 40])
def test_the_table_never_cuts_a_number_or_a_policy_name(width: int) -> None:
    """A narrow terminal gets one row per figure, and as many tables as the policies need."""
    from rich.console import Console

    from gpudock.cli.simulate_cmd import _table

    names = ("fifo", "fair-share", "default", "srtf-oracle")
    summaries = [{"policy": n, "oracle": n.endswith("oracle"), **SUMMARY} for n in names]
    console = Console(width=width, record=True)
    _table(summaries, console)

    text = console.export_text()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= width
    cells = {cell.strip() for line in text.splitlines() for cell in line.split("│")}
    assert set(NUMBERS) <= cells
    for name in ("fifo", "fair-share", "default", "avg_queue_delay_s", "gpu_utilization"):
        assert name in text
    assert ("srtf-oracle (oracle)" in text) == (width == 200)  # else folded onto two lines


def test_report_writes_index_and_four_pngs(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = simulate("--trace", trace, "--cluster", "2x8", "--policy", "priority",
                      "--policy", "default", "--json", "--report", out)  # fmt: skip
    assert len(figures(result)) == 2
    assert (out / "index.html").is_file()
    for name in PLOTS:
        assert (out / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert sorted(p.name for p in out.iterdir()) == sorted(["index.html", *PLOTS])
    page = (out / "index.html").read_text()
    assert all(f'src="{name}"' in page for name in PLOTS)


def test_a_policy_yaml_file(trace: Path, tmp_path: Path) -> None:
    policy = tmp_path / "spread.yaml"
    policy.write_text("name: spread-fair\nbase: fair-share\nscheduler:\n  placement: spread\n")
    [summary] = figures(
        simulate("--trace", trace, "--cluster", "1x8", "--policy", policy, "--json")
    )
    assert summary["policy"] == "spread-fair"
    assert summary["preemptions"] == 1  # fair-share reclaim, as the base policy does


def test_a_job_no_node_could_run_is_refused_as_at_submit(tmp_path: Path) -> None:
    """As the server refuses it at submit, with the filters' reason; a policy file that
    keeps such jobs pending (``never_fits: pending``) replays it, unfinished."""
    path = tmp_path / "big.csv"
    path.write_text("job_id,submit_time,duration,num_gpus\na,0,100,8\nhuge,0,10,64\n")
    result = simulate("--trace", path, "--cluster", "1x8", "--policy", "fifo", "--json")
    [summary] = figures(result)
    why = "needs 8 nodes (a gang) that can each take 8 GPUs; the cluster has 1 node"
    assert (summary["jobs"], summary["skipped_jobs"], summary["refused"]) == (1, 1, {why: 1})
    assert f"fifo: refused 1 job (huge): can never be scheduled: {why}" in result.stderr
    waits = tmp_path / "waits.yaml"
    waits.write_text("name: waits\nbase: fifo\nscheduler:\n  never_fits: pending\n")
    result = simulate("--trace", path, "--cluster", "1x8", "--policy", waits, "--json")
    [summary] = figures(result)
    assert (summary["jobs"], summary["unfinished"], summary["skipped_jobs"]) == (1, 1, 0)


def test_skip_bad_rows_reports_each_and_replays_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("job_id,submit_time,duration,num_gpus\na,0,100,8\nb,zz,50,8\n")
    result = simulate("--trace", path, "--cluster", "1x8", "--policy", "fifo", "--json",
                      "--skip-bad-rows")  # fmt: skip
    [summary] = figures(result)
    assert summary["jobs"] == 1
    assert "skipped line 3: submit_time 'zz' is not a number" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "nope"], "error: unknown policy 'nope' (known: static, fifo, priority"),
        (["--cluster", "1y8"], "error: cluster '1y8': expected NODESxGPUS"),
        (["--cluster", "0x8"], "error: cluster '0x8': a node group needs at least 1 node"),
        (["--policy", "fifo", "--policy", "fifo"], "error: policy names repeat: fifo, fifo"),
        (["--preempt-grace", "-1"], "error: --preempt-grace must be a finite number of seconds"),
        (["--preempt-grace", "nan"], "error: --preempt-grace must be a finite number of seconds"),
        (["--cycle-interval", "inf"], "error: --cycle-interval must be a finite number of seconds"),
        (["--format", "slurm"], "error: --format must be one of canonical, philly"),
    ],
)
def test_bad_options_fail_with_one_line(trace: Path, args: list[str], message: str) -> None:
    base = {"--trace": str(trace), "--cluster": "1x8", "--policy": "fifo"}
    given = {a for a in args if a.startswith("--")}
    argv = [x for key, value in base.items() if key not in given for x in (key, value)]
    assert one_line_error(simulate(*argv, *args)).startswith(message)


def test_a_report_folder_that_cannot_be_made_fails_before_the_replay(
    trace: Path, tmp_path: Path
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("a file, not a folder")
    result = simulate("--trace", trace, "--cluster", "1x8", "--policy", "fifo", "--report", taken)
    assert one_line_error(result).startswith(f"error: --report {taken}: cannot create the folder")


def test_a_missing_trace_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.csv"
    result = simulate("--trace", missing, "--cluster", "1x8", "--policy", "fifo")
    assert one_line_error(result) == f"error: missing.csv: no such file: {missing}"


def test_a_malformed_row_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("job_id,submit_time,duration,num_gpus\na,0,100,8\n\nb,10,-5,8\n")
    result = simulate("--trace", path, "--cluster", "1x8", "--policy", "fifo")
    assert one_line_error(result) == "error: bad.csv line 4: duration '-5' must be greater than 0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("name: p\nbase: fifo\nbogus: 1\n", "policy file {}: unknown keys bogus"),
        ("base: nope\n", "policy file {}: unknown base 'nope'"),
        ("scheduler:\n  placement: diagonal\n", "policy file {}: scheduler.placement: "),
        ("- a list\n", "policy file {}: expected a mapping with name, base, scheduler"),
        ("scheduler:\n  policies:\n    order: nope\n", "unknown order policy 'nope' (known: "),
    ],
)
def test_a_bad_policy_file(trace: Path, tmp_path: Path, text: str, message: str) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(text)
    result = simulate("--trace", trace, "--cluster", "1x8", "--policy", policy)
    assert one_line_error(result).startswith("error: " + message.format(policy))


def test_a_policy_file_that_is_not_utf8(trace: Path, tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_bytes(b"name: p\n# \xff\n")
    result = simulate("--trace", trace, "--cluster", "1x8", "--policy", policy)
    assert one_line_error(result).startswith(f"error: policy file {policy}: not UTF-8 text")


def test_a_trace_with_nothing_to_replay(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("job_id,submit_time,duration,num_gpus\n")
    result = simulate("--trace", path, "--cluster", "1x8", "--policy", "fifo")
    assert one_line_error(result) == "error: the trace has no jobs to replay"


def test_errors_stay_on_one_line_when_stderr_is_a_pipe(trace: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    argv = [sys.executable, "-m", "gpudock.cli.main", "simulate", "--trace", str(trace),
            "--cluster", "1x8", "--policy", "nope"]  # fmt: skip
    done = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
