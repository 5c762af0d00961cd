#!/usr/bin/env python3
"""What a restart's cost does to each policy: one trace, several restart costs.

Replays a trace (default: the repository's ``traces/sample.csv`` on ``4x8``) with
every policy at every ``--costs`` value (``SimConfig.restart_overhead``, seconds of
work each restart redoes), each policy paying the same cost in the same run, and
prints JSON: per cost and policy the average JCT, preemptions (in all, per job, the
most of one job) and the share of GPU time lost to restarts; per cost
``default_vs_srtf`` (default's average JCT over srtf-oracle's) and whether default
preempted no more per job than the oracle. The build, commit and CPUs are recorded
(``benchmarks/_meta.py``).

Usage::

    benchmarks/restart_cost.py [--trace traces/sample.csv] [--cluster 4x8]
                               [--costs 0,30,60,300] [--policies default,srtf-oracle,fair-share]
                               [--checkpoint-interval S] [--cycle-interval S]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _meta import build_info  # noqa: E402  (beside this script)

from gpudock.sim.cluster import parse_cluster  # noqa: E402
from gpudock.sim.engine import SimConfig, simulate  # noqa: E402
from gpudock.sim.metrics import summarize  # noqa: E402
from gpudock.sim.policies import load_policy  # noqa: E402
from gpudock.sim.traces import detect_format, load_trace  # noqa: E402

FIGURES = ("avg_jct_s", "preemptions", "preemptions_per_job", "most_preemptions")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", default=str(ROOT / "traces" / "sample.csv"))
    parser.add_argument("--cluster", default="4x8")
    parser.add_argument("--costs", default="0,30,60,300", help="restart overheads, seconds")
    parser.add_argument("--policies", default="default,srtf-oracle,fair-share")
    parser.add_argument("--checkpoint-interval", type=float, default=None)
    parser.add_argument("--cycle-interval", type=float, default=0.0)
    args = parser.parse_args()

    trace = Path(args.trace)
    jobs = load_trace(trace, detect_format(trace)).jobs
    cluster = parse_cluster(args.cluster)
    rows: list[dict[str, object]] = []
    for cost in (float(c) for c in args.costs.split(",")):
        config = SimConfig(
            cycle_interval=args.cycle_interval,
            restart_overhead=cost,
            checkpoint_interval=args.checkpoint_interval,
        )
        row: dict[str, object] = {"restart_overhead_s": cost}
        for name in args.policies.split(","):
            figures = summarize(simulate(jobs, cluster, load_policy(name.strip()), config))
            row[name.strip()] = {key: figures[key] for key in (*FIGURES, "lost_gpu_share")}
            print(f"{cost:g} s {name}: avg JCT {figures['avg_jct_s']} s", file=sys.stderr)
        default, srtf = row.get("default"), row.get("srtf-oracle")
        if isinstance(default, dict) and isinstance(srtf, dict):
            row["default_vs_srtf"] = round(default["avg_jct_s"] / srtf["avg_jct_s"], 3)
            row["default_preempts_no_more"] = (
                default["preemptions_per_job"] <= srtf["preemptions_per_job"]
            )
        rows.append(row)
    out = {
        "trace": trace.name,
        "jobs": len(jobs),
        "cluster": args.cluster,
        "checkpoint_interval_s": args.checkpoint_interval,
        "cycle_interval_s": args.cycle_interval,
        "costs": rows,
        **build_info(),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
