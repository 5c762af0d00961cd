#!/usr/bin/env python3
"""Instructions per scheduling cycle, counted by valgrind: a measure the machine's noise does
not move.

Wall-clock cycle times on a shared machine move by ±30% from run to run (the
same snapshot scheduled twelve times took 23-40 ms of CPU time), so small
changes to the engine are hard to see in ``scheduler_scale.py``. This counts
the instructions one cycle executes instead (``valgrind --tool=callgrind``),
for ``scheduler_scale.py``'s latency snapshots: 1000 queued jobs on 1000 x 8
GPUs at an occupancy level, with the running jobs that hold the busy GPUs.

For each level it runs the same program twice under valgrind: building the
snapshots and one warm-up cycle (the indexes and summaries a server keeps
from cycle to cycle), then ``--cycles`` more cycles of fresh pending jobs on
the same cluster, or none. The difference, divided by ``--cycles``, is
printed as ``instructions_per_cycle`` (JSON). Under valgrind Python runs
about 50 times slower: a level takes a minute or two. The child runs with
``PYTHONHASHSEED=0`` and one OpenBLAS/OpenMP thread, so two runs of the same code
agree to a few thousand instructions.

Usage: ``benchmarks/cycle_instructions.py --levels half full --cycles 3``
(compare two versions of the code with ``--repo DIR``, a checkout of the other
version, in the same run).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import _meta  # beside this script

LEVELS = {"empty": 0.0, "half": 0.5, "full": 1.0}
REPO = Path(__file__).resolve().parents[1]


def child(repo: Path, level: str, cycles: int, seed: int) -> None:
    """The measured program: snapshots, a warm-up cycle, then ``cycles`` cycles."""
    sys.path.insert(0, str(repo / "benchmarks"))
    sys.path.insert(0, str(repo / "src"))
    import scheduler_scale as scale  # the checkout's own benchmark helpers and engine

    rnd, extra = random.Random(seed), random.Random(seed + 1)
    cluster = scale.Cluster(1000, 8, rnd)
    scale.fill(cluster, LEVELS[level], rnd)
    nodes = cluster.views()
    running = tuple(scale.holders(cluster, 0.0, extra, 10**9))
    config = scale.SchedulerConfig(placement="binpack")
    snapshots = [
        scale.Snapshot(
            0.0,
            nodes,
            tuple(
                scale.with_limit(scale.random_job(c * 10_000 + i, rnd, float(i)), extra)
                for i in range(1000)
            ),
            running,
        )
        for c in range(4)
    ]
    # a server's session (checkouts from before ``SchedulerSession`` kept it in class variables)
    kept = {"session": scale.SchedulerSession()} if hasattr(scale, "SchedulerSession") else {}
    scale.schedule(snapshots[0], config, **kept)  # warm: what a server keeps between cycles
    for k in range(cycles):
        scale.schedule(snapshots[1 + k % 3], config, **kept)


def count(repo: Path, level: str, cycles: int, seed: int) -> int:
    """Instructions of ``child`` under callgrind."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        command = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--child",
            level,
            str(cycles),
            "--seed",
            str(seed),
            "--repo",
            str(repo),
        ]
        # one thread per numerical library (imported by dependencies): idle OpenBLAS or
        # OpenMP threads spin for a while and move the count by tens of millions
        quiet = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
        subprocess.run(command, check=True, capture_output=True, env={**os.environ, **quiet})
        for line in out.read_text().splitlines():
            if line.startswith("summary:"):
                return int(line.split()[1])
    raise RuntimeError(f"no summary line in callgrind's output for {level}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--levels", nargs="+", choices=list(LEVELS), default=list(LEVELS))
    parser.add_argument("--cycles", type=int, default=3, help="cycles measured per level (>= 1)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to measure")
    parser.add_argument("--child", nargs=2, metavar=("LEVEL", "CYCLES"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.repo, args.child[0], int(args.child[1]), args.seed)
        return
    if args.cycles < 1:
        parser.error(f"--cycles must be at least 1, got {args.cycles}")
    if shutil.which("valgrind") is None:
        parser.error("valgrind is not installed (Debian: apt-get install valgrind)")
    result: dict[str, object] = {
        "repo": str(args.repo),
        "cycles": args.cycles,
        "seed": args.seed,
        "python": sys.version.split()[0],
        **_meta.build_info(args.repo),  # the measured checkout's build and commit
    }
    for level in args.levels:
        base = count(args.repo, level, 0, args.seed)
        total = count(args.repo, level, args.cycles, args.seed)
        result[level] = {"instructions_per_cycle": round((total - base) / args.cycles)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
