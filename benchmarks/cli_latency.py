#!/usr/bin/env python3
"""Wall time of ``gpudock --help`` and ``gpudock jobs``, beside ``docker ps``.

Starts a real ``gpudock server`` (SQLite, 4 emulated H100s) on the local Docker
engine and fills it with 1,000 jobs: the first holds all four GPUs (``sleep``),
the other 999 wait as PENDING behind it. Then times, as a user's shell would run
them (a fresh process each, output to a pipe), ``--runs`` times each after one
warm-up, in turn:

* ``help``: ``gpudock --help`` (no server involved);
* ``jobs``: ``gpudock jobs`` (the newest 200 jobs as a table);
* ``jobs_json``: ``gpudock jobs -o json --limit 1000``;
* ``docker_ps``: ``docker ps`` against the same machine's engine;
* ``python``: ``python -c pass``, the floor of any Python command here.

Prints medians (and every run) in seconds; the goal is ``help`` <= 0.3 s and
``jobs`` <= 0.5 s on an idle machine. ``load_avg`` says how idle it was.
Usage: ``benchmarks/cli_latency.py [--json] [--runs 5] [--jobs 1000] [--image IMAGE]``.
Needs a running dockerd (``scripts/lib.sh`` start_dockerd) and the image.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _meta import build_info

BIN = Path(sys.executable).parent
GOALS = {"help": 0.3, "jobs": 0.5}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(home: Path, port: int) -> subprocess.Popen[bytes]:
    """A server whose scheduler wakes on events and otherwise every 30 s."""
    config = home / "server.yaml"
    config.write_text("schedule_interval: 30s\nexecutor:\n  stop_grace: 1s\n")
    proc = subprocess.Popen(
        [str(BIN / "gpudock"), "server", "--port", str(port), "--emulate-gpus", "4xH100-80GB",
         "--config", str(config), "--log-level", "warning"],
        env={**os.environ, "GPUDOCK_HOME": str(home)},
        stdout=(home / "server.log").open("wb"),
        stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180  # a loaded machine starts it slowly
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"server at {url} did not start:\n{(home / 'server.log').read_text()}")


def fill(url: str, token: str, jobs: int, image: str) -> None:
    """One job on all four GPUs, then ``jobs - 1`` one-GPU jobs that wait behind it."""
    from gpudock.cli.client import Client

    client = Client(url, token)
    client.request(
        "POST", "/v1/jobs", json={"image": image, "command": ["sleep", "3600"], "gpus": 4}
    )
    for number in range(1, jobs):
        client.request(
            "POST",
            "/v1/jobs",
            json={"image": image, "command": ["true"], "gpus": 1, "name": f"wait-{number}"},
        )
        if number % 200 == 0:
            print(f"submitted {number + 1}/{jobs} jobs", file=sys.stderr)


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.decode()[-400:]}")
    return elapsed


def measure(commands: dict[str, list[str]], env: dict[str, str], runs: int) -> dict[str, Any]:
    """Each command once to warm the page cache, then ``runs`` rounds, interleaved."""
    for argv in commands.values():
        timed(argv, env)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            samples[name].append(timed(argv, env))
    return {
        name: {"median_s": round(statistics.median(s), 3), "runs_s": [round(x, 3) for x in s]}
        for name, s in samples.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--image", default="gpudock-test/busybox:latest")
    args = parser.parse_args()
    docker = shutil.which("docker")
    home = Path(tempfile.mkdtemp(prefix="gpudock-cli-latency-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start_server(home, port)
    try:
        token = (home / "admin-token").read_text().strip()
        fill(url, token, args.jobs, args.image)
        env = {**os.environ, "GPUDOCK_URL": url, "GPUDOCK_TOKEN": token}
        commands = {
            "help": [str(BIN / "gpudock"), "--help"],
            "jobs": [str(BIN / "gpudock"), "jobs"],
            "jobs_json": [str(BIN / "gpudock"), "jobs", "-o", "json", "--limit", str(args.jobs)],
            "python": [sys.executable, "-c", "pass"],
        }
        if docker:
            commands["docker_ps"] = [docker, "ps"]
        load_before = os.getloadavg()
        figures = measure(commands, env, args.runs)
        result = {
            "jobs_in_server": args.jobs,
            "runs": args.runs,
            "cpus": os.cpu_count(),
            "load_avg_1m": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
            "goal_s": GOALS,
            "met": {k: figures[k]["median_s"] <= v for k, v in GOALS.items()},
            **figures,
            **build_info(),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        subprocess.run(
            [docker or "docker", "rm", "-f", *containers(home)], capture_output=True, check=False
        )
        shutil.rmtree(home, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for name in commands:
            print(f"{name:10} median {figures[name]['median_s']:.3f} s  {figures[name]['runs_s']}")
        print(f"load average (1 min) before/after: {result['load_avg_1m']}")
    return 0


def containers(home: Path) -> list[str]:
    """The server's containers, by its instance label (read back from its database)."""
    import sqlite3

    try:
        with sqlite3.connect(home / "gpudock.db") as db:
            row = db.execute("SELECT value FROM meta WHERE key='instance_id'").fetchone()
    except sqlite3.Error:
        return []
    if not row:
        return []
    done = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=gpudock.instance={row[0]}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.split()


if __name__ == "__main__":
    sys.exit(main())
