#!/usr/bin/env python3
"""Submit storm: many submits through the HTTP API while short GPU jobs run, then an audit.

For each database (SQLite, and PostgreSQL on a scratch database of
``GPUDOCK_TEST_PG_URL``), starts a real ``gpudock server`` with 8 emulated
GPUs on the local dockerd and sends ``--submits`` ``POST /v1/jobs`` (1 GPU,
``true``) with ``--concurrency`` in flight. Prints:

* ``acked_per_s`` (201s per second of the storm), ``server_cores`` (the CPU time
  of every server process over the storm's wall time), ``server_cpu_ms_per_ack``
  and ``machine_busy_cores`` (every process: the jobs' containers and dockerd
  too); ``idle_cores`` and ``storm_cores``: the cores of the controller and of
  each API worker, over ``--idle`` seconds before the storm and over the storm;
  ``p50_ms``/``p99_ms`` latency
  (to the final answer: a 503 ``Unavailable`` is sent again after its ``Retry-After``,
  up to 3 times, as the API asks; ``failures`` counts those);
* the audit: ``lost`` (acknowledged, not in the store), ``duplicated`` (an id
  acknowledged twice, or stored jobs nobody was told about), ``double_booked``
  (pairs of jobs that held one GPU at overlapping times, from the state
  history), ``pending_without_reason`` (after a scheduling cycle).

With ``--replicas N`` (PostgreSQL only) the storm goes to N servers on one
database, round robin: the leader and N - 1 ``--standby`` followers, which
serve the API and wake the leader through PostgreSQL; the cores are per
replica (``r0`` leads) and the audit covers them all.

Goal: every submit acknowledged, 0 lost/duplicated/double-booked; on SQLite
>= 200 acknowledged/s and p99 <= 1 s.
Usage: ``benchmarks/submit_storm.py [--json] [--submits 10000] [--concurrency 64]
[--db sqlite,postgres] [--gpus 8] [--api-workers N] [--idle 5] [--replicas 1]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import docker
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._stack import (
    IMAGE,
    Server,
    all_jobs,
    build_info,
    double_booked,
    machine_cpu,
    scratch_database,
)

T = TypeVar("T")
SPEC = {"image": IMAGE, "command": ["true"], "gpus": 1, "retries": 0}
RETRIES_503 = 3


def storm(servers: list[Server], submits: int, concurrency: int) -> dict[str, Any]:
    """Fire the submits, the i-th to replica i mod N; return the acknowledged ids,
    latencies and failures."""
    local = threading.local()
    lock = threading.Lock()
    acked: list[int] = []
    latencies: list[float] = []
    failures: Counter[str] = Counter()

    def one(i: int) -> None:
        apis = getattr(local, "apis", None)
        if apis is None:
            apis = local.apis = [server.client() for server in servers]
        api = apis[i % len(apis)]
        started = time.perf_counter()
        for _ in range(RETRIES_503 + 1):  # 503 means nothing was stored: send it again
            try:
                response = api.post("/v1/jobs", json={**SPEC, "name": f"storm-{i}"})
            except httpx.HTTPError as exc:
                with lock:
                    failures[type(exc).__name__] += 1
                return
            if response.status_code != 503:
                break
            with lock:
                failures["503 (retried)"] += 1
            time.sleep(float(response.headers.get("Retry-After", "1")))
        elapsed = time.perf_counter() - started
        with lock:
            latencies.append(elapsed)
            if response.status_code == 201:
                acked.append(int(response.json()["id"]))
            else:
                failures[str(response.status_code)] += 1

    began = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(submits)))
    wall = time.perf_counter() - began
    return {"acked": acked, "latencies": latencies, "failures": failures, "wall": wall}


def audit(server: Server, acked: list[int], settle: float) -> dict[str, Any]:
    """Compare what clients were told with what the store holds.

    Pending jobs get their reasons from the next scheduling cycle, so the
    listing is read again (up to ``settle`` seconds) until none lacks one;
    ``settle_s`` says how long that took.
    """
    began = time.monotonic()
    with server.client() as api:
        while True:
            jobs = all_jobs(api)
            bare = [j for j in jobs if j["state"] == "PENDING" and not j["pending_reasons"]]
            if not bare or time.monotonic() - began > settle:
                break
            time.sleep(0.5)
    stored = Counter(j["id"] for j in jobs)
    told = Counter(acked)
    return {
        "stored": len(jobs),
        "lost": sum(1 for i in told if i not in stored),
        "duplicated": sum(c - 1 for c in told.values() if c > 1)
        + sum(1 for i in stored if i not in told)
        + sum(c - 1 for c in stored.values() if c > 1),
        "double_booked": double_booked(server.db_url),
        "pending_without_reason": len(bare),
        "settle_s": round(time.monotonic() - began, 1),
        "states": dict(Counter(j["state"] for j in jobs)),
    }


def cores_by_process(servers: list[Server], work: Callable[[], T]) -> tuple[dict[str, float], T]:
    """What ``work`` returned, and the cores each server process used while it ran (named
    ``rN:process`` for replica N when there are several)."""

    def cpu() -> dict[str, float]:
        if len(servers) == 1:
            return servers[0].cpu_by_process()
        return {
            f"r{i}:{name}": seconds
            for i, server in enumerate(servers)
            for name, seconds in server.cpu_by_process().items()
        }

    before, began = cpu(), time.perf_counter()
    out = work()
    after, wall = cpu(), time.perf_counter() - began
    return {name: (after[name] - before.get(name, 0.0)) / wall for name in after}, out


def replicas(tmp: Path, url: str | None, args: argparse.Namespace) -> list[Server]:
    """The leader, then ``args.replicas - 1`` followers on its database."""
    (tmp / "r0").mkdir()
    leader = Server(tmp / "r0", url, args.gpus, api_workers=args.api_workers)
    servers = [leader]
    try:
        for i in range(1, args.replicas):
            (tmp / f"r{i}").mkdir()
            follower = Server(
                tmp / f"r{i}",
                leader.db_url,
                args.gpus,
                api_workers=args.api_workers,
                args=("--standby",),
            )
            follower.token = leader.token
            servers.append(follower)
    except BaseException:
        for server in servers:
            server.stop()
        raise
    return servers


def run_one(kind: str, args: argparse.Namespace, client: Any) -> dict[str, Any]:
    if args.replicas > 1 and kind != "postgres":
        raise SystemExit("--replicas above 1 needs --db postgres: followers serve on PostgreSQL")
    with tempfile.TemporaryDirectory(prefix="gpudock-storm-") as tmp, scratch_database(kind) as url:
        servers = replicas(Path(tmp), url, args)
        server = servers[0]
        try:
            idle = cores_by_process(servers, lambda: time.sleep(args.idle))[0]
            machine_before = machine_cpu()
            storm_cores, result = cores_by_process(
                servers, lambda: storm(servers, args.submits, args.concurrency)
            )
            cpu = sum(storm_cores.values()) * result["wall"]
            busy = machine_cpu()["busy"] - machine_before["busy"]
            checked = audit(server, result["acked"], args.settle)
        finally:
            for follower in servers[1:]:
                follower.stop()
            server.stop(client)
    latencies = sorted(result["latencies"]) or [0.0]
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    return {
        "replicas": args.replicas,
        "submits": args.submits,
        "acknowledged": len(result["acked"]),
        "failures": dict(result["failures"]),
        "wall_s": round(result["wall"], 2),
        "acked_per_s": round(len(result["acked"]) / result["wall"], 1),
        "server_cores": round(cpu / result["wall"], 2),
        "server_cpu_ms_per_ack": round(1000 * cpu / max(1, len(result["acked"])), 2),
        "machine_busy_cores": round(busy / result["wall"], 2),
        "idle_cores": {name: round(cores, 3) for name, cores in idle.items()},
        "storm_cores": {name: round(cores, 2) for name, cores in storm_cores.items()},
        "p50_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(p99 * 1000, 1),
        **checked,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submits", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--db", default="sqlite,postgres", help="comma-separated")
    parser.add_argument("--api-workers", type=int, default=None, help="default: the server's")
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of idle CPU read")
    parser.add_argument(
        "--settle", type=float, default=60.0, help="at most this long for pending reasons"
    )
    parser.add_argument(
        "--replicas", type=int, default=1, help="servers on one PostgreSQL database (1 leads)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.replicas < 1:
        parser.error("--replicas must be at least 1")
    client = docker.from_env()
    out: dict[str, Any] = {
        "benchmark": "submit_storm",
        **build_info(),
        "concurrency": args.concurrency,
        "gpus": args.gpus,
        "api_workers": args.api_workers,
    }
    for kind in args.db.split(","):
        out[kind] = run_one(kind.strip(), args, client)
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for kind in args.db.split(","):
            r = out[kind]
            print(
                f"{kind}: {r['acknowledged']}/{r['submits']} acked, {r['acked_per_s']}/s "
                f"(server {r['server_cores']} cores, {r['server_cpu_ms_per_ack']} ms CPU each), "
                f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms; lost {r['lost']}, "
                f"duplicated {r['duplicated']}, double-booked {r['double_booked']}, "
                f"pending without reason {r['pending_without_reason']}; cores idle "
                f"{r['idle_cores']}, in the storm {r['storm_cores']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
