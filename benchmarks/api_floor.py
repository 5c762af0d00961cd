#!/usr/bin/env python3
"""API floor: the cheapest authenticated request beside a bare FastAPI app, and what each costs.

Starts a bare FastAPI app (``_bare_app.py``: one sync dependency reading a
header, one sync endpoint returning ``{"jobs": []}``, served by uvicorn as
gpudock serves its API), then a real ``gpudock server`` (SQLite, 8 emulated
GPUs, no jobs, ``--api-workers`` API processes), and sends each, from the
same client (``--concurrency`` threads, httpx, keep-alive), ``--requests``
``GET /v1/jobs?limit=1`` (for gpudock: a bearer token checked, an empty page).
Prints, for gpudock at the top level and for the bare app under ``bare``:

* ``per_s``; ``server_cores`` (the CPU time of every server process over the
  wall time) and ``server_cpu_ms_per_request``; ``client_cores`` (this
  process); ``machine_busy_cores`` / ``machine_steal_cores`` (all processes,
  and what the hypervisor took);
* for gpudock, ``processes``: the cores of the controller and of each API worker;

and ``cpu_ratio``: gpudock's CPU per request over the bare app's.
Goal: ``cpu_ratio`` <= 2 and gpudock >= 400 requests/s.
``--profile DIR`` also samples each server while its load runs with
``py-spy record --gil`` (``_profile.py``) and adds the summary as ``profile``.
Usage: ``benchmarks/api_floor.py [--json] [--requests 3000] [--concurrency 64]
[--api-workers N] [--profile DIR]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import docker
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._profile import Profile
from benchmarks._stack import Server, build_info, free_port, machine_cpu, process_cpu

PATH = "/v1/jobs?limit=1"
WARMUP = 200


def load(
    client: Callable[[], httpx.Client],
    cpu: Callable[[], dict[str, float]],
    requests: int,
    concurrency: int,
) -> dict[str, Any]:
    """Send ``requests`` GETs, ``concurrency`` at a time; the rate and the server's CPU
    (``cpu``: seconds used so far by each of its processes)."""
    local = threading.local()

    def one(_: int) -> None:
        api = getattr(local, "api", None)
        if api is None:
            api = local.api = client()
        api.get(PATH).raise_for_status()

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, range(WARMUP)))  # connections open, caches warm
        cpu_before, began = cpu(), time.perf_counter()
        mine_before, machine_before = _own_cpu(), machine_cpu()
        list(pool.map(one, range(requests)))
        wall, cpu_after = time.perf_counter() - began, cpu()
        mine, machine = _own_cpu() - mine_before, machine_cpu()
    used = {name: cpu_after[name] - cpu_before.get(name, 0.0) for name in cpu_after}
    total = sum(used.values())
    return {
        "requests": requests,
        "wall_s": round(wall, 2),
        "per_s": round(requests / wall, 1),
        "server_cores": round(total / wall, 2),
        "server_cpu_ms_per_request": round(1000 * total / requests, 3),
        "processes": {name: round(seconds / wall, 2) for name, seconds in used.items()},
        "client_cores": round(mine / wall, 2),
        "machine_busy_cores": round((machine["busy"] - machine_before["busy"]) / wall, 2),
        "machine_steal_cores": round((machine["steal"] - machine_before["steal"]) / wall, 2),
    }


@contextlib.contextmanager
def bare_app() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The bare app (``_bare_app.py``) on a free port: its URL and process."""
    port = free_port()
    script = Path(__file__).resolve().parent / "_bare_app.py"
    proc = subprocess.Popen([sys.executable, str(script), str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + PATH, timeout=2).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the bare app did not start")
            time.sleep(0.1)
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextlib.contextmanager
def profiled(folder: Path | None, name: str, pid: int, out: dict[str, Any]) -> Iterator[None]:
    """Sample ``pid`` (and its children) while the block runs; summary into ``out``."""
    if folder is None:
        yield
        return
    folder.mkdir(parents=True, exist_ok=True)
    profile = Profile(pid, folder / f"{name}.txt")
    try:
        yield
    finally:
        out.setdefault("profile", {})[name] = profile.stop()


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with bare_app() as (url, proc):
        with profiled(args.profile, "bare", proc.pid, out):
            bare = load(
                lambda: httpx.Client(base_url=url, headers={"Authorization": "Bearer x"}),
                lambda: {"bare": process_cpu(proc.pid)},
                args.requests,
                args.concurrency,
            )
        del bare["processes"]
    with tempfile.TemporaryDirectory(prefix="gpudock-floor-") as tmp:
        server = Server(Path(tmp), None, 8, api_workers=args.api_workers)
        try:
            with profiled(args.profile, "gpudock", server.proc.pid, out):
                mine = load(server.client, server.cpu_by_process, args.requests, args.concurrency)
        finally:
            server.stop(docker.from_env())
    ratio = mine["server_cpu_ms_per_request"] / max(1e-9, bare["server_cpu_ms_per_request"])
    return {**mine, "bare": bare, "cpu_ratio": round(ratio, 2), **out}


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--api-workers", type=int, default=None, help="default: the server's")
    parser.add_argument("--profile", type=Path, default=None, help="folder for py-spy samples")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args)
    out = {
        "benchmark": "api_floor",
        **build_info(),
        "path": PATH,
        "concurrency": args.concurrency,
        "api_workers": args.api_workers,
        **result,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        bare = result["bare"]
        print(
            f"GET {PATH}, {args.concurrency} in flight: gpudock {result['per_s']}/s, "
            f"{result['server_cpu_ms_per_request']} ms CPU each ({result['server_cores']} "
            f"cores: {result['processes']}); bare FastAPI {bare['per_s']}/s, "
            f"{bare['server_cpu_ms_per_request']} ms CPU each; CPU ratio {result['cpu_ratio']}; "
            f"client {result['client_cores']} cores; machine {result['machine_busy_cores']} "
            f"busy, {result['machine_steal_cores']} stolen"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
