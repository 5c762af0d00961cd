#!/usr/bin/env python3
"""Elastic jobs on Philly: avg JCT and GPU utilisation with and without elasticity.

Replays the Philly window of ``philly_contended.py`` (jobs submitted
2017-10-01 to 2017-11-30 in the virtual clusters of ``philly_vc.csv``, the VCs
as queues) on one shared 64 x 8-GPU cluster, three times, with one policy:

* ``fixed``: every job asks for its trace's GPU count;
* ``elastic-start``: every one-node, whole-GPU job asks for ``N-min(8, 2N)``
  GPUs (``gpus: N-2N``) without ``elastic: restart``: it grows only when it
  starts, into GPUs no job waits for;
* ``elastic-restart``: the same with ``elastic: restart``: a running job is
  also restarted on more GPUs when they free up and no job waits, and any
  job takes back the GPUs above a minimum before preempting anyone.

Assumptions, stated because the figures depend on them: a job's work scales
linearly with its GPUs (the trace's duration is its run time at its minimum,
the trace's count), and a restart keeps the work done (checkpointing jobs),
redoing ``--restart-overhead`` seconds. Real jobs scale sublinearly, so the
elastic figures are an upper bound on what elasticity gains.

Prints JSON: per variant the ``gpudock simulate --json`` figures and the
restarts to grow (``resizes``), plus ``jct_vs_fixed`` and
``utilization_vs_fixed`` per elastic variant. ``build``, ``commit`` and the
CPUs name the code and the machine (``benchmarks/_meta.py``).

Usage::

    benchmarks/elastic_philly.py [--traces DIR] [--policy default] [--cluster 64x8]
                                 [--limit N] [--cycle-interval S] [--factor 2]
                                 [--restart-overhead S] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from _meta import build_info, traces_dir  # noqa: E402  (beside this script)

from gpudock.sim.cluster import parse_cluster, philly_vc_queues  # noqa: E402
from gpudock.sim.engine import SimConfig, simulate  # noqa: E402
from gpudock.sim.metrics import summarize  # noqa: E402
from gpudock.sim.policies import load_policy  # noqa: E402
from gpudock.sim.traces import TraceJob, load_trace  # noqa: E402

VARIANTS = ("fixed", "elastic-start", "elastic-restart")
FIGURES = ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_delay_s", "gpu_utilization")


def elastic(jobs: Sequence[TraceJob], factor: int, per_node: int, restart: bool) -> list[TraceJob]:
    """``jobs`` with every one-node whole-GPU job asking for ``N`` to ``min(per_node, factor
    * N)`` GPUs (``restart``: with ``elastic: restart``); the others unchanged."""
    out = []
    for job in jobs:
        top = min(per_node, factor * job.num_gpus)
        if job.nodes == 1 and job.gpu_fraction is None and 0 < job.num_gpus < top:
            job = replace(job, max_gpus=top, elastic_restart=restart)
        out.append(job)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=str(traces_dir()), help="folder holding philly/")
    parser.add_argument("--policy", default="default")
    parser.add_argument("--cluster", default="64x8")
    parser.add_argument("--limit", type=int, default=None, help="replay only the first N jobs")
    parser.add_argument("--cycle-interval", type=float, default=0.0)
    parser.add_argument("--factor", type=int, default=2, help="max GPUs = factor x the trace's")
    parser.add_argument("--restart-overhead", type=float, default=0.0, help="seconds redone")
    parser.add_argument("--json", action="store_true", help="print JSON only (the default)")
    args = parser.parse_args()

    philly = Path(args.traces) / "philly"
    started = time.perf_counter()
    trace = load_trace(philly / "philly.csv", "philly", start="2017-10-01", end="2017-12-01")
    cluster = parse_cluster(args.cluster)
    queues = philly_vc_queues(philly / "philly_vc.csv", cluster.total_gpus)
    known = {q.name for q in queues.queues}
    jobs = [j for j in trace.jobs if j.queue in known]
    if args.limit:
        jobs = jobs[: args.limit]
    cluster = replace(cluster, queues=queues)
    per_node = max(group.gpus for group in cluster.groups)
    load_seconds = time.perf_counter() - started

    config = SimConfig(cycle_interval=args.cycle_interval, restart_overhead=args.restart_overhead)
    traces = {
        "fixed": list(jobs),
        "elastic-start": elastic(jobs, args.factor, per_node, restart=False),
        "elastic-restart": elastic(jobs, args.factor, per_node, restart=True),
    }
    results: dict[str, dict[str, object]] = {}
    for variant in VARIANTS:
        run = simulate(traces[variant], cluster, load_policy(args.policy), config)
        results[variant] = {**summarize(run), "resizes": run.resizes}
        print(
            f"{variant}: avg JCT {results[variant]['avg_jct_s']} s, utilisation "
            f"{results[variant]['gpu_utilization']}, in {run.sim_seconds:.1f} s",
            file=sys.stderr,
        )
    fixed = results["fixed"]
    out: dict[str, object] = {
        "trace": "philly 2017-10-01..2017-11-30",
        "jobs": len(jobs),
        "elastic_jobs": sum(1 for j in traces["elastic-restart"] if j.max_gpus is not None),
        "cluster": args.cluster,
        "policy": args.policy,
        "cycle_interval_s": args.cycle_interval,
        "factor": args.factor,
        "restart_overhead_s": args.restart_overhead,
        "scaling": "linear (upper bound)",
        "load_seconds": round(load_seconds, 2),
        "variants": {v: _figures(r) for v, r in results.items()},
        **{
            f"{v.replace('-', '_')}_jct_vs_fixed": _ratio(results[v], fixed, "avg_jct_s")
            for v in VARIANTS[1:]
        },
        **{
            f"{v.replace('-', '_')}_utilization_vs_fixed": _ratio(
                results[v], fixed, "gpu_utilization"
            )
            for v in VARIANTS[1:]
        },
        **build_info(),
    }
    print(json.dumps(out, indent=2))


def _figures(result: dict[str, object]) -> dict[str, object]:
    return {k: result.get(k) for k in (*FIGURES, "preemptions", "resizes", "sim_seconds")}


def _ratio(a: dict[str, object], b: dict[str, object], key: str) -> float | None:
    x, y = a.get(key), b.get(key)
    if not isinstance(x, int | float) or not isinstance(y, int | float) or not y:
        return None
    return round(float(x) / float(y), 3)


if __name__ == "__main__":
    main()
