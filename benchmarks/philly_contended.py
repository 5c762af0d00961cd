#!/usr/bin/env python3
"""Philly under contention: policies compared on one shared 64 x 8-GPU cluster.

Replays the Philly jobs submitted 2017-10-01 to 2017-11-30 (the 68,503 jobs
of the 11 virtual clusters listed in ``philly_vc.csv``; submissions before
2017-12-01) through ``gpudock simulate``'s engine, with the VCs as queues
(guarantees = each VC's node share, scaled to the cluster), on one shared
cluster of 64 nodes x 8 GPUs, so there is real contention.

Prints JSON: per policy the ``gpudock simulate --json`` figures, plus
``default_vs_srtf`` = default avg JCT / srtf-oracle avg JCT measured in the
same run (goal <= 1.15; each policy's figures hold its ``preemptions_per_job`` and
``lost_gpu_share``), and ``sim_seconds`` per policy (the speed goal is
``default`` replaying all 82,247 Philly jobs in <= 60 s; ``--all-jobs``
runs that). ``build`` says whether the scheduler's and the simulator's hot
modules ran ``compiled`` (mypyc, ``gpudock._native``) or ``pure``, ``build_status``
why; ``GPUDOCK_PURE=1`` runs their source. ``commit`` and ``cpu_count`` /
``cpu_affinity`` name the code and the machine (``benchmarks/_meta.py``).

Usage::

    benchmarks/philly_contended.py [--traces DIR] [--policies fifo,sjf-oracle,...]
                                   [--cluster 64x8] [--limit N] [--all-jobs]
                                   [--cycle-interval S] [--seed N]
                                   [--restart-overhead S] [--checkpoint-interval S]

``--restart-overhead`` (seconds of work each restart redoes, default 0) and
``--checkpoint-interval`` (a preemption also loses the run since the last
checkpoint) are the cost every policy pays in the run (``SimConfig``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _meta import build_info, traces_dir  # noqa: E402  (beside this script)

from gpudock.sim.cluster import parse_cluster, philly_vc_queues  # noqa: E402
from gpudock.sim.engine import SimConfig, simulate  # noqa: E402
from gpudock.sim.metrics import summarize  # noqa: E402
from gpudock.sim.policies import load_policy  # noqa: E402
from gpudock.sim.traces import load_trace  # noqa: E402

DEFAULT_POLICIES = "fifo,sjf-oracle,srtf-oracle,fair-share,default"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(traces_dir()), help="folder holding philly/")
    parser.add_argument("--policies", default=DEFAULT_POLICIES)
    parser.add_argument("--cluster", default="64x8")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N jobs")
    parser.add_argument(
        "--all-jobs", action="store_true", help="all 82,247 jobs (the speed check), not the window"
    )
    parser.add_argument("--cycle-interval", type=float, default=0.0)
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="shuffle the jobs submitted at the same instant (SimConfig.seed; 0: trace order)",
    )
    parser.add_argument(
        "--restart-overhead",
        type=float,
        default=0.0,
        help="seconds of work each restart redoes, for every policy (SimConfig.restart_overhead)",
    )
    parser.add_argument(
        "--checkpoint-interval",
        type=float,
        default=None,
        help="seconds between a job's checkpoints: a preemption loses the run since the last",
    )
    args = parser.parse_args()

    philly = Path(args.traces) / "philly"
    started = time.perf_counter()
    if args.all_jobs:
        trace = load_trace(philly / "philly.csv", "philly")
    else:
        trace = load_trace(philly / "philly.csv", "philly", start="2017-10-01", end="2017-12-01")
    cluster = parse_cluster(args.cluster)
    queues = philly_vc_queues(philly / "philly_vc.csv", cluster.total_gpus)
    known = {q.name for q in queues.queues}
    jobs = trace.jobs if args.all_jobs else [j for j in trace.jobs if j.queue in known]
    if args.all_jobs:  # VCs missing from philly_vc.csv get no guarantee: map them to one
        jobs = [j if j.queue in known else replace(j, queue=sorted(known)[0]) for j in jobs]
    if args.limit:
        jobs = jobs[: args.limit]
    cluster = replace(cluster, queues=queues)
    load_seconds = time.perf_counter() - started

    results: dict[str, dict[str, object]] = {}
    config = SimConfig(
        cycle_interval=args.cycle_interval,
        seed=args.seed,
        restart_overhead=args.restart_overhead,
        checkpoint_interval=args.checkpoint_interval,
    )
    for name in args.policies.split(","):
        run = simulate(jobs, cluster, load_policy(name.strip()), config)
        results[run.policy] = summarize(run)
        print(
            f"{run.policy}: avg JCT {results[run.policy]['avg_jct_s']} s "
            f"in {run.sim_seconds:.1f} s",
            file=sys.stderr,
        )
    out: dict[str, object] = {
        "trace": "philly 2017-10-01..2017-11-30" if not args.all_jobs else "philly (all jobs)",
        "jobs": len(jobs),
        "cluster": args.cluster,
        "cycle_interval_s": args.cycle_interval,
        "seed": args.seed,
        "restart_overhead_s": args.restart_overhead,
        "checkpoint_interval_s": args.checkpoint_interval,
        "load_seconds": round(load_seconds, 2),
        "policies": results,
        "sim_seconds": {name: r["sim_seconds"] for name, r in results.items()},
        **build_info(),  # pure or compiled (mypyc), the commit, the CPUs
    }
    default, srtf = results.get("default"), results.get("srtf-oracle")
    if default and srtf and default["avg_jct_s"] and srtf["avg_jct_s"]:
        out["default_vs_srtf"] = round(float(default["avg_jct_s"]) / float(srtf["avg_jct_s"]), 3)  # type: ignore[arg-type]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
