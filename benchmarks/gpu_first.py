#!/usr/bin/env python3
"""GPUs first: one-GPU jobs submitted behind a backlog of CPU-only jobs, on idle GPUs.

As a team would try it, on a real ``gpudock server`` (SQLite) on the local
dockerd with ``--gpus`` idle emulated GPUs: ``--cpu-jobs`` short CPU-only
jobs (``true``, no GPU) are submitted one after another, then ``--gpu-jobs``
one-GPU jobs (``true``); every job is waited for. Each job's submit →
allocated (``unplaced``), allocated → its container's start (``launch``) and
submit → start (``to_running``) come from the store, as medians and maxima
per kind of job; ``all_ended_s`` is the first submit to the last job's end.
Two variants, each on a fresh server:

* ``cpus_not_counted``: ``job_defaults: {cpus: null}``, so CPU-only jobs take
  no cores and only the GPUs bound the GPU jobs. **Goal: median
  ``to_running`` of the GPU jobs <= 5 s.**
* ``default_cpus``: every job gets the default 1 CPU on a node with the host's
  cores (2 here): the CPUs are the binding resource, a correct wait. The
  GPU jobs' reasons while they wait are printed (``waiting_reasons``: each
  distinct list, with how many jobs gave it): they must name the CPUs.

Memory is not the question here: the node offers 4 TiB in both variants.
Usage: ``benchmarks/gpu_first.py [--json] [--cpu-jobs 300] [--gpu-jobs 16]
[--gpus 8] [--variants cpus_not_counted,default_cpus]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import docker
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._stack import IMAGE, Server, all_jobs, build_info, double_booked

VARIANTS: dict[str, dict[str, Any]] = {
    "cpus_not_counted": {"job_defaults": {"cpus": None}, "node": {"memory": "4TiB"}},
    "default_cpus": {"node": {"memory": "4TiB"}},
}
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}
UNFINISHED = "PENDING,ALLOCATED,STARTING,RUNNING"


def submit_all(api: httpx.Client, count: int, gpus: int, prefix: str) -> list[int]:
    """``count`` jobs of ``true`` with ``gpus`` GPUs each, one after another; their ids."""
    ids = []
    for i in range(count):
        spec = {"image": IMAGE, "command": ["true"], "gpus": gpus, "retries": 0}
        response = api.post("/v1/jobs", json={**spec, "name": f"{prefix}-{i}"})
        response.raise_for_status()
        ids.append(int(response.json()["id"]))
    return ids


def wait_running(api: httpx.Client, ids: list[int], timeout: float) -> dict[str, int] | None:
    """Poll until every job in ``ids`` has started (or ended). Returns the reasons the
    pending ones gave at the first poll where any had some (each distinct list of
    reasons, joined, with how many jobs gave it), or None if none was seen pending."""
    deadline, reasons = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        jobs = [api.get(f"/v1/jobs/{i}").json() for i in ids]
        waiting = [j for j in jobs if j["state"] == "PENDING" and j["pending_reasons"]]
        if reasons is None and waiting:
            reasons = dict(Counter(
                " / ".join(f"[{r['layer']}] {r['message']}" for r in j["pending_reasons"])
                for j in waiting
            ))  # fmt: skip
        if all(j["started_at"] or j["state"] in TERMINAL for j in jobs):
            return reasons
        time.sleep(0.5)
    raise SystemExit(f"GPU jobs not started within {timeout:g}s")


def wait_all_ended(api: httpx.Client, timeout: float) -> None:
    """Poll (for one unfinished job, as ``dispatch.py`` does) until every job has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        unfinished = api.get("/v1/jobs", params={"state": UNFINISHED, "limit": 1})
        unfinished.raise_for_status()
        if not unfinished.json():
            return
        time.sleep(0.5)
    raise SystemExit(f"jobs still unfinished after {timeout:g}s")


def figures(jobs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and max of unplaced, launch and to_running over ``jobs``, in seconds."""
    out: dict[str, Any] = {}
    spans = {
        "unplaced": [j["allocated_at"] - j["submitted_at"] for j in jobs if j["allocated_at"]],
        "launch": [
            j["started_at"] - j["allocated_at"]
            for j in jobs
            if j["started_at"] and j["allocated_at"]
        ],
        "to_running": [j["started_at"] - j["submitted_at"] for j in jobs if j["started_at"]],
    }
    for name, values in spans.items():
        out[f"{name}_median_s"] = round(statistics.median(values), 2) if values else None
        out[f"{name}_max_s"] = round(max(values), 2) if values else None
    return out


def run_variant(name: str, args: argparse.Namespace, client: Any) -> dict[str, Any]:
    """One fresh server with ``VARIANTS[name]``; the backlog, then the GPU jobs."""
    with tempfile.TemporaryDirectory(prefix="gpudock-gpu-first-") as tmp:
        server = Server(Path(tmp), None, args.gpus, VARIANTS[name])
        try:
            with server.client() as api:
                began = time.time()
                cpu_ids = submit_all(api, args.cpu_jobs, 0, "cpu")
                gpu_ids = submit_all(api, args.gpu_jobs, 1, "gpu")
                submitted = time.time() - began
                reasons = wait_running(api, gpu_ids, args.timeout)
                wait_all_ended(api, args.timeout)
                ended = time.time() - began
                found = {j["id"]: j for j in all_jobs(api)}
            gpu_jobs = [found[i] for i in gpu_ids]
            cpu_jobs = [found[i] for i in cpu_ids]
            return {
                "submit_s": round(submitted, 2),
                "all_ended_s": round(ended, 2),
                "gpu": figures(gpu_jobs),
                "cpu": figures(cpu_jobs),
                "cpu_started_before_last_gpu": sum(
                    1
                    for j in cpu_jobs
                    if j["started_at"]
                    and j["started_at"] < max(g["started_at"] or 0 for g in gpu_jobs)
                ),
                "waiting_reasons": reasons,
                "states": dict(Counter(j["state"] for j in found.values())),
                "double_booked": double_booked(server.db_url),
            }
        finally:
            server.stop(client)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu-jobs", type=int, default=300)
    parser.add_argument("--gpu-jobs", type=int, default=16)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--timeout", type=float, default=600, help="seconds per variant")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    chosen = [v for v in args.variants.split(",") if v]
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant {unknown[0]!r}; choose from {', '.join(VARIANTS)}")
    client = docker.from_env(timeout=300)
    out: dict[str, Any] = {
        "benchmark": "gpu_first",
        **build_info(),
        "cpu_jobs": args.cpu_jobs,
        "gpu_jobs": args.gpu_jobs,
        "gpus": args.gpus,
    }
    for variant in chosen:
        out[variant] = run_variant(variant, args, client)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for variant in chosen:
            gpu = out[variant]["gpu"]
            print(
                f"{variant}: GPU jobs submit->running median {gpu['to_running_median_s']} s "
                f"(unplaced {gpu['unplaced_median_s']} s, launch {gpu['launch_median_s']} s)"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
