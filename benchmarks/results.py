#!/usr/bin/env python3
"""Write ``benchmarks/RESULTS.md`` from the benchmarks' JSON in ``benchmarks/results/``.

Each ``benchmarks/results/*.json`` holds one benchmark run: the object the
benchmark printed with ``--json`` (or by default, for those that always
print JSON). The page has one section per benchmark: its runs, each with
the command that produced it and where it ran; one table of the runs'
figures side by side (objects of scalars as ``key.field``); and a table per
object of objects (``policies``), one row per entry.

Keys read besides the figures, each optional:

* ``benchmark``: the script's name; else the longest benchmark script name
  that starts the file's name (``scheduler_scale-1000.json``), else the name;
* ``command``: the command line that produced the run;
* ``recorded``: when (UTC);
* ``build`` (``pure`` / ``compiled``), ``commit`` and ``cpus``, at the top
  level or inside a ``build`` object; "unrecorded" where absent.

``record`` runs a benchmark and stores its JSON with ``benchmark``,
``command`` and ``recorded`` added (keys the benchmark set win)::

    python benchmarks/results.py record --name scheduler_scale-100 -- \\
        benchmarks/scheduler_scale.py --nodes 100 --queued 5000 --json
    python benchmarks/results.py            # rewrite benchmarks/RESULTS.md
    python benchmarks/results.py --check    # exit 1 if RESULTS.md is out of date

Rendering is deterministic (files by name, keys in their JSON order), so
``--check`` can gate it. The page never holds figures the JSON lacks.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
PAGE = HERE / "RESULTS.md"
UNRECORDED = "unrecorded"
META = ("benchmark", "command", "recorded", "build", "commit", "cpus")
"""Keys shown as a run's provenance, not as figures."""
COMMAND = "python benchmarks/results.py"

Scalar = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class Run:
    """One results file: its name (the file's stem), benchmark and JSON object."""

    name: str
    benchmark: str
    data: dict[str, Any]


def known_benchmarks(folder: Path = HERE) -> list[str]:
    """The benchmark scripts' names (``benchmarks/*.py`` but this one), longest first."""
    names = [p.stem for p in folder.glob("*.py") if p.stem != Path(__file__).stem]
    return sorted(names, key=lambda n: (-len(n), n))


def benchmark_of(name: str, data: dict[str, Any], known: Sequence[str]) -> str:
    """The run's ``benchmark`` key, else the known script name that starts ``name``."""
    if isinstance(data.get("benchmark"), str):
        return str(data["benchmark"])
    for script in known:
        if name == script or name.startswith((script + "-", script + "_", script + ".")):
            return script
    return name


def load(folder: Path, known: Sequence[str]) -> list[Run]:
    """Every ``*.json`` in ``folder``, by file name; ``ValueError`` naming a bad file."""
    runs = []
    for path in sorted(folder.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a readable JSON file ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected one JSON object, got {type(data).__name__}")
        runs.append(Run(path.stem, benchmark_of(path.stem, data, known), data))
    return runs


def provenance(data: dict[str, Any]) -> dict[str, str]:
    """``build``, ``commit`` and ``cpus`` of a run, each "unrecorded" when absent."""
    block = data.get("build")
    nested = block if isinstance(block, dict) else {}
    out = {}
    for key in ("build", "commit", "cpus"):
        value = nested.get(key, data.get(key))
        if key == "build" and isinstance(value, dict):  # a block without a ``build`` key
            value = value.get("kind")
        out[key] = UNRECORDED if value is None or value == "" else str(value)
    return out


def cell(value: Any) -> str:
    """A table cell: scalars as JSON writes them (strings bare), lists comma-separated."""
    if isinstance(value, list):
        return ", ".join(cell(v) for v in value)
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("|", "\\|").replace("\n", " ")


def is_scalar(value: Any) -> bool:
    """A value a cell shows: a scalar, or a list of scalars."""
    if isinstance(value, list):
        return all(is_scalar(v) and not isinstance(v, list) for v in value)
    return value is None or isinstance(value, str | int | float | bool)


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def singular(name: str) -> str:
    """``policies`` -> ``policy``, ``seeds`` -> ``seed``: a row table's first header."""
    if name.endswith("ies"):
        return name[:-3] + "y"
    return name[:-1] if name.endswith("s") else name


def row_table(title: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    """One row per key of ``rows``, one column per scalar field any of them has.

    A field that only repeats the row's name (``policy``) is left out."""
    columns: list[str] = []
    for fields in rows.values():
        columns += [k for k, v in fields.items() if is_scalar(v) and k not in columns]
    columns = [c for c in columns if any(f.get(c) != name for name, f in rows.items())]
    body = [[name, *(fields.get(c, "") for c in columns)] for name, fields in rows.items()]
    return table([title, *columns], body)


def flat(data: dict[str, Any]) -> dict[str, Any]:
    """A run's scalar figures: top-level scalars, and objects of scalars as ``key.field``."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in META:
            continue
        if is_scalar(value):
            out[key] = value
        elif isinstance(value, dict) and all(is_scalar(v) for v in value.values()):
            out.update({f"{key}.{field}": v for field, v in value.items()})
    return out


def nested(data: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """A run's objects of objects (``policies``), each a row table."""
    return {
        key: value
        for key, value in data.items()
        if key not in META
        and isinstance(value, dict)
        and value
        and all(isinstance(v, dict) for v in value.values())
    }


def section(benchmark: str, runs: Sequence[Run]) -> list[str]:
    """One benchmark's section: its runs (command and provenance), then one table of every
    run's scalar figures side by side, then each run's row tables."""
    out = [f"## {benchmark}", ""]
    for run in runs:
        where = provenance(run.data)
        command = run.data.get("command")
        out += [
            f"* **{run.name}**: " + (f"`{command}`" if command else f"command {UNRECORDED}"),
            f"  (build {where['build']}; commit {where['commit']}; CPUs {where['cpus']}; "
            f"recorded {run.data.get('recorded') or UNRECORDED})",
        ]
    out.append("")
    figures = [flat(run.data) for run in runs]
    keys: list[str] = []
    for fields in figures:
        keys += [k for k in fields if k not in keys]
    if keys:
        rows = [[key, *(fields.get(key, "") for fields in figures)] for key in keys]
        out += [*table(["figure", *(run.name for run in runs)], rows), ""]
    for run in runs:
        for key, rows_of in nested(run.data).items():
            out += [f"`{key}` of {run.name}:", "", *row_table(singular(key), rows_of), ""]
    return out


def render(runs: Sequence[Run]) -> str:
    """The whole page: a header, then one section per benchmark, by name."""
    out = [
        "# Benchmark results",
        "",
        f"Generated by `{COMMAND}` from `benchmarks/results/*.json`; do not edit by hand.",
        f"Record a run with `{COMMAND} record --name NAME -- benchmarks/SCRIPT.py ARGS`,",
        "then regenerate this page. Figures are comparable only between runs with the",
        'same build, commit and machine; "unrecorded" means the run\'s JSON does not say.',
        "What each figure means is in the benchmark's own docstring.",
        "",
    ]
    by_benchmark: dict[str, list[Run]] = {}
    for run in runs:
        by_benchmark.setdefault(run.benchmark, []).append(run)
    if not by_benchmark:
        out += ["No results recorded yet.", ""]
    for benchmark in sorted(by_benchmark):
        out += section(benchmark, by_benchmark[benchmark])
    return "\n".join(out).rstrip("\n") + "\n"


def record(name: str | None, argv: Sequence[str], folder: Path) -> Path:
    """Run ``python ARGV`` from the repository root and store its JSON as ``NAME.json``."""
    if not argv:
        raise ValueError("record needs a benchmark script after --")
    script = Path(argv[0])
    done = subprocess.run(
        [sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False
    )
    if done.returncode != 0:
        raise ValueError(f"{shlex.join(argv)} exited with {done.returncode}")
    try:
        data = json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{shlex.join(argv)} printed no JSON object ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{shlex.join(argv)} printed JSON that is not an object")
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    recorded = {"benchmark": script.stem, "command": shlex.join(argv), "recorded": now}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name or script.stem}.json"
    path.write_text(json.dumps(recorded | data, indent=2) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["record"]:
        parser = argparse.ArgumentParser(prog="results.py record")
        parser.add_argument("--name", help="the file's name in benchmarks/results/ (no .json)")
        parser.add_argument("--results", type=Path, default=RESULTS)
        parser.add_argument("command", nargs=argparse.REMAINDER)
        args = parser.parse_args(argv[1:])
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        try:
            print(record(args.name, command, args.results))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder of *.json runs")
    parser.add_argument("--out", type=Path, default=PAGE, help="the page to write")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    try:
        page = render(load(args.results, known_benchmarks()))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != page:
            print(f"{args.out} is out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
