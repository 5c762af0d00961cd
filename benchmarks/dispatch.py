#!/usr/bin/env python3
"""Dispatch overhead: N jobs of ``true`` through gpudock beside a bare docker-py loop.

In one run, on the local dockerd, with 8 (``--gpus``) emulated GPUs:

* **bare**: a docker-py loop runs ``--jobs`` containers of ``true``, ``--gpus`` at a
  time, each with one GPU device request and the hardening gpudock applies
  (``--init``, all capabilities dropped, no-new-privileges, a pids limit),
  waiting for each to exit and removing it;
* **gpudock**: the same jobs (1 GPU, ``true``) submitted to a real ``gpudock
  server`` (SQLite), from the first submit to the last job's ``finished_at``.
  While they run, the client asks twice a second for one unfinished job
  (``state=`` filter, ``limit=1``), as a script waiting for its jobs would;
  it lists every job once, at the end, for the audit. (Listing all 1,000
  jobs twice a second would cost the server more CPU than it spends on the
  jobs, on a machine whose cores the containers need too.)

The bare loop runs twice, before and after gpudock, so that a machine that
speeds up or slows down during the run (a shared one does) moves both
sides alike. Prints the makespans and ``ratio`` = gpudock / the mean of the
two bare runs (goal <= 1.3: the control plane's whole overhead on real
work), and the audit of the gpudock run (jobs not SUCCEEDED, double-booked
GPU pairs).
Usage: ``benchmarks/dispatch.py [--json] [--jobs 1000] [--gpus 8]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import docker.types

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._stack import IMAGE, Server, all_jobs, build_info, double_booked

UNFINISHED = "PENDING,ALLOCATED,STARTING,RUNNING"


def bare(client: Any, jobs: int, gpus: int) -> float:
    """Makespan of ``jobs`` containers of ``true``, ``gpus`` at a time (one GPU each)."""

    def worker(slot: int) -> None:
        for _ in range(slot, jobs, gpus):
            container = client.containers.run(
                IMAGE,
                ["true"],
                detach=True,
                init=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                pids_limit=4096,
                labels={"gpudock.benchmark": "dispatch"},
                device_requests=[
                    docker.types.DeviceRequest(device_ids=[str(slot)], capabilities=[["gpu"]])
                ],
            )
            container.wait()
            container.remove(force=True)

    began = time.monotonic()
    with ThreadPoolExecutor(gpus) as pool:
        list(pool.map(worker, range(gpus)))
    return time.monotonic() - began


def through_gpudock(client: Any, jobs: int, gpus: int, timeout: float) -> dict[str, Any]:
    """Submit ``jobs`` 1-GPU jobs of ``true``; wait until all end; makespan and audit."""
    with tempfile.TemporaryDirectory(prefix="gpudock-dispatch-") as tmp:
        server = Server(Path(tmp), None, gpus)
        try:
            with server.client() as api:
                began = time.time()
                for i in range(jobs):
                    spec = {"image": IMAGE, "command": ["true"], "gpus": 1, "name": f"d-{i}"}
                    response = api.post("/v1/jobs", json=spec)
                    response.raise_for_status()
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    unfinished = api.get("/v1/jobs", params={"state": UNFINISHED, "limit": 1})
                    unfinished.raise_for_status()
                    if not unfinished.json():
                        break
                    time.sleep(0.5)
                found = all_jobs(api)
            ends = [j["finished_at"] for j in found if j["finished_at"]]
            return {
                "makespan_s": round(max(ends) - began, 2) if ends else None,
                "states": dict(Counter(j["state"] for j in found)),
                "not_succeeded": sum(1 for j in found if j["state"] != "SUCCEEDED"),
                "double_booked": double_booked(server.db_url),
            }
        finally:
            server.stop(client)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=3600, help="seconds for gpudock")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    client = docker.from_env(timeout=300)
    bare_before = bare(client, args.jobs, args.gpus)
    ours = through_gpudock(client, args.jobs, args.gpus, args.timeout)
    bare_after = bare(client, args.jobs, args.gpus)
    bare_s = (bare_before + bare_after) / 2
    ratio = round(ours["makespan_s"] / bare_s, 2) if ours["makespan_s"] else None
    out = {
        "benchmark": "dispatch",
        **build_info(),
        "jobs": args.jobs,
        "gpus": args.gpus,
        "bare_makespan_s": round(bare_s, 2),
        "bare_runs_s": [round(bare_before, 2), round(bare_after, 2)],
        "gpudock_makespan_s": ours["makespan_s"],
        "ratio": ratio,
        "gpudock": ours,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(
            f"{args.jobs} jobs on {args.gpus} GPUs: bare {out['bare_makespan_s']} s, "
            f"gpudock {out['gpudock_makespan_s']} s, ratio {ratio}; "
            f"not succeeded {ours['not_succeeded']}, double-booked {ours['double_booked']}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
