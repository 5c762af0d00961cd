#!/usr/bin/env python3
"""API floor: the cheapest authenticated request, many in flight, and what it costs the server.

Starts a real ``gpudock server`` (SQLite, 8 emulated GPUs, no jobs) and sends
``--requests`` ``GET /v1/jobs?limit=1`` (a bearer token looked up, an empty
page) from ``--concurrency`` client threads, as ``submit_storm.py`` sends its
submits. Prints ``per_s``, ``server_cores`` (the server process's CPU time
over the wall time: near 1.0, the process is at its limit),
``server_cpu_ms_per_request``, ``client_cores`` (this process) and
``machine_busy_cores`` / ``machine_steal_cores`` (all processes, and what
the hypervisor took: a figure with much steal measured a crowded host).
No submit can be cheaper than this request, so ``per_s`` bounds what one
server process on this machine can acknowledge.
Usage: ``benchmarks/api_floor.py [--json] [--requests 3000] [--concurrency 64]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._stack import Server, build_info, machine_cpu

PATH = "/v1/jobs?limit=1"
WARMUP = 200


def load(server: Server, requests: int, concurrency: int) -> dict[str, Any]:
    """Send ``requests`` GETs, ``concurrency`` at a time; rate and the server's CPU."""
    local = threading.local()

    def one(_: int) -> None:
        api = getattr(local, "api", None)
        if api is None:
            api = local.api = server.client()
        api.get(PATH).raise_for_status()

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(WARMUP)))  # connections open, caches warm
        cpu_before, began = server.cpu_seconds(), time.perf_counter()
        mine_before, machine_before = _own_cpu(), machine_cpu()
        list(pool.map(one, range(requests)))
        wall, cpu = time.perf_counter() - began, server.cpu_seconds() - cpu_before
        mine, machine = _own_cpu() - mine_before, machine_cpu()
    return {
        "requests": requests,
        "wall_s": round(wall, 2),
        "per_s": round(requests / wall, 1),
        "server_cores": round(cpu / wall, 2),
        "server_cpu_ms_per_request": round(1000 * cpu / requests, 2),
        "client_cores": round(mine / wall, 2),
        "machine_busy_cores": round((machine["busy"] - machine_before["busy"]) / wall, 2),
        "machine_steal_cores": round((machine["steal"] - machine_before["steal"]) / wall, 2),
    }


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpudock-floor-") as tmp:
        server = Server(Path(tmp), None, 8)
        try:
            result = load(server, args.requests, args.concurrency)
        finally:
            server.stop(docker.from_env())
    out = {
        "benchmark": "api_floor",
        **build_info(),
        "path": PATH,
        "concurrency": args.concurrency,
        **result,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(
            f"GET {PATH}, {args.concurrency} in flight: {result['per_s']}/s; server "
            f"{result['server_cores']} cores, {result['server_cpu_ms_per_request']} ms CPU each; "
            f"client {result['client_cores']} cores; machine {result['machine_busy_cores']} "
            f"busy, {result['machine_steal_cores']} stolen"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
