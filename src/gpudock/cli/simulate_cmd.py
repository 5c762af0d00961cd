"""``gpudock simulate``: replay a trace through the real scheduler, policy against policy."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from gpudock.cli.common import LazyConsole, lazy_console
from gpudock.cli.progress import ProgressLine

if TYPE_CHECKING:
    from rich.console import Console

    from gpudock.sim.results import RunRecord

# The simulator (NumPy, SciPy, the scheduler) loads when the command runs, not
# when ``gpudock`` starts: these names are for the help text, and a test holds
# them equal to ``gpudock.sim.policies.POLICIES`` and ``gpudock.sim.traces.FORMATS``.
POLICY_NAMES = ("static", "fifo", "priority", "fair-share", "sjf-oracle", "srtf-oracle", "default")
FORMAT_NAMES = ("canonical", "philly", "alibaba", "itp")

err = lazy_console(stderr=True)
out = cast("Console", LazyConsole(width=None if sys.stdout.isatty() else 160))


def _fail(message: str, code: int = 2) -> typer.Exit:
    from rich.markup import escape

    err.print(f"[red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def simulate_command(
    trace: Annotated[Path, typer.Option("--trace", help="trace file (CSV, or ARCHIVE::MEMBER)")],
    cluster: Annotated[
        str,
        typer.Option(
            "--cluster", help="NODESxGPUS[:MODEL[:MEMORY]] (e.g. 64x8:H100), '+'-joined, or YAML"
        ),
    ],
    policy: Annotated[
        list[str],
        typer.Option(
            "--policy",
            help=f"policy name ({', '.join(POLICY_NAMES)}) or YAML file; repeat to compare",
        ),
    ],
    format: Annotated[
        str | None,
        typer.Option("--format", help=f"{'|'.join(FORMAT_NAMES)}; default: from the header"),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="print JSON, one object per policy")
    ] = False,
    report: Annotated[
        Path | None, typer.Option("--report", help="write index.html and PNG plots here")
    ] = None,
    seed: Annotated[
        int,
        typer.Option("--seed", help="nonzero: shuffle jobs submitted at the same instant (seeded)"),
    ] = 0,
    skip_bad_rows: Annotated[
        bool, typer.Option("--skip-bad-rows", help="skip malformed rows instead of stopping")
    ] = False,
    start: Annotated[str | None, typer.Option("--start", help="first submission to keep")] = None,
    end: Annotated[str | None, typer.Option("--end", help="keep submissions before this")] = None,
    philly_vc: Annotated[
        Path | None,
        typer.Option("--philly-vc", help="philly_vc.csv: one queue per VC, guarantees scaled"),
    ] = None,
    cycle_interval: Annotated[
        float, typer.Option("--cycle-interval", help="seconds per scheduling period (0: per event)")
    ] = 0.0,
    preempt_grace: Annotated[
        float, typer.Option("--preempt-grace", help="seconds a preempted job holds its GPUs")
    ] = 10.0,
    quiet: Annotated[
        bool, typer.Option("--quiet", "-q", help="no progress line on stderr")
    ] = False,
) -> None:
    """Replay a GPU cluster trace through gpudock's scheduler and compare policies.

    The same scheduler code as the server runs on a virtual clock; oracle
    policies (which read true durations) are reference bounds only. On a terminal,
    stderr shows each replay's progress (``--quiet``: not).
    """
    from rich.markup import escape

    from gpudock.sim.cluster import parse_cluster, philly_vc_queues
    from gpudock.sim.engine import SimConfig, simulate
    from gpudock.sim.metrics import compare, recommend
    from gpudock.sim.policies import load_policy
    from gpudock.sim.traces import FORMATS, TraceError, detect_format, load_trace

    if not policy:
        raise _fail("give at least one --policy")
    try:
        policies = [load_policy(p) for p in policy]
        spec = parse_cluster(cluster)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        raise _fail(f"policy names repeat: {', '.join(names)}")
    for flag, value in (("--cycle-interval", cycle_interval), ("--preempt-grace", preempt_grace)):
        if not (math.isfinite(value) and value >= 0):
            raise _fail(f"{flag} must be a finite number of seconds >= 0, got {value}")
    if report is not None:  # before the replay, which may take minutes
        try:
            report.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _fail(f"--report {report}: cannot create the folder ({exc.strerror})") from None
    try:
        fmt = format or detect_format(trace)
        if fmt not in FORMATS:
            raise _fail(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        loaded = load_trace(trace, fmt, skip_bad_rows=skip_bad_rows, start=start, end=end)
    except (TraceError, ValueError) as exc:
        raise _fail(str(exc)) from None
    for bad in loaded.skipped[:20]:
        err.print(f"skipped line {bad.line}: {escape(bad.message)}", highlight=False)
    if len(loaded.skipped) > 20:
        err.print(f"... and {len(loaded.skipped) - 20} more skipped rows")
    jobs = loaded.jobs
    if philly_vc is not None:
        try:
            queues = philly_vc_queues(philly_vc, spec.total_gpus)
        except (OSError, ValueError) as exc:
            raise _fail(f"--philly-vc: {exc}") from None
        spec = replace(spec, queues=queues)
        known = {q.name for q in queues.queues}
        dropped = sum(1 for j in jobs if j.queue not in known)
        if dropped:
            err.print(f"dropped {dropped} jobs of VCs not in {philly_vc.name}")
        jobs = [j for j in jobs if j.queue in known]
    if not jobs:
        raise _fail("the trace has no jobs to replay")
    config = SimConfig(cycle_interval=cycle_interval, preempt_grace=preempt_grace, seed=seed)
    runs = []
    for chosen in policies:
        if not as_json:
            err.print(f"simulating {chosen.name} on {len(jobs)} jobs ...")
        shown = None if quiet or not sys.stderr.isatty() else ProgressLine(sys.stderr, chosen.name)
        runs.append(simulate(jobs, spec, chosen, config, shown.update if shown else None))
        _refused(runs[-1])
    summaries = compare(runs)
    if as_json:
        typer.echo(json.dumps(summaries, indent=2))
    else:
        _table(summaries)
        out.print(recommend(summaries))
    if report is not None:
        from gpudock.sim.report import write_report

        try:
            index = write_report(
                runs, report, title="gpudock simulate", trace=str(trace), cluster=cluster
            )
        except OSError as exc:
            raise _fail(f"--report {report}: cannot write the report ({exc})", 1) from None
        err.print(f"report: {index}")


def _refused(run: RunRecord) -> None:
    """On stderr: the jobs a server would refuse at submit (no node could ever run them, or
    their queue never admit them), by reason, in the server's words:
    ``refused N jobs (ids): can never be scheduled: reason``."""
    from rich.markup import escape

    for why, ids in sorted(run.refused.items(), key=lambda item: (-len(item[1]), item[0])):
        shown = ", ".join(ids[:5]) + (", ..." if len(ids) > 5 else "")
        label = "job" if len(ids) == 1 else "jobs"
        err.print(
            f"{run.policy}: refused {len(ids)} {label} ({escape(shown)}): can never be "
            f"scheduled: {escape(why)}",
            highlight=False,
        )


FIELDS = (
    "jobs",
    "unfinished",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "avg_queue_delay_s",
    "makespan_s",
    "gpu_utilization",
    "preemptions",
)
"""The table's figures, in order (``--json`` has them all)."""


def _table(summaries: list[dict[str, object]], console: Console | None = None) -> None:
    """The figures as a table that never cuts a number: one row per policy when that fits
    the console's width; else one row per figure and a column per policy, in as many
    tables as it takes for the columns to fit."""
    from rich.table import Table

    console = console or out
    labels = [str(s["policy"]) + (" (oracle)" if s["oracle"] else "") for s in summaries]
    cells = [[_cell(s.get(f)) for f in FIELDS] for s in summaries]
    wide = [
        max(len(x) for x in [name, *(row[i] for row in cells)]) for i, name in enumerate(FIELDS)
    ]
    if _width([max(map(len, ["policy", *labels])), *wide]) <= console.width:
        table = Table(title="gpudock simulate")
        table.add_column("policy", overflow="fold")
        for name, width in zip(FIELDS, wide, strict=True):
            table.add_column(name, justify="right", no_wrap=True, min_width=width)
        for label, row in zip(labels, cells, strict=True):
            table.add_row(label, *row)
        console.print(table)
        return
    for chunk in _chunks(labels, cells, console.width):
        table = Table(title="gpudock simulate")
        table.add_column("figure", no_wrap=True)
        for i in chunk:
            width = max(len(c) for c in cells[i])
            table.add_column(labels[i], justify="right", overflow="fold", min_width=width)
        for f, name in enumerate(FIELDS):
            table.add_row(name, *(cells[i][f] for i in chunk))
        console.print(table)


def _width(columns: list[int]) -> int:
    """What a rich table of these content widths takes: 2 of padding and a rule each."""
    return sum(w + 3 for w in columns) + 1


def _chunks(labels: list[str], cells: list[list[str]], width: int) -> list[list[int]]:
    """Policies (by position) grouped so each group's figure-per-row table fits ``width``
    (a group holds at least one policy; its name may fold onto several lines)."""
    first = max(len(f) for f in FIELDS)
    chunks: list[list[int]] = [[]]
    used = [first]
    for i, row in enumerate(cells):
        column = max(max(len(c) for c in row), min(len(labels[i]), 12))
        if chunks[-1] and _width([*used, column]) > width:
            chunks.append([])
            used = [first]
        chunks[-1].append(i)
        used.append(column)
    return chunks


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4f}" if value < 10 else f"{value:,.0f}"
    return str(value)
