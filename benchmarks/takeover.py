#!/usr/bin/env python3
"""Takeover: how long a ``--standby`` server takes to lead after ``kill -9`` of the leader.

For each database (``--db``: SQLite, and PostgreSQL from ``GPUDOCK_TEST_PG_URL``)
and each of ``--trials``: a leader ``gpudock server`` (4 emulated GPUs) and a
``--standby`` server on the same database, on the local dockerd; one job
(``sleep``, 1 GPU) runs on the leader; the leader is killed with SIGKILL (its
API workers die with it). Prints per database:

* ``takeover_s``: from the kill to the standby's first ``/healthz`` 200;
* ``adopted_s``: from the kill to the standby answering that the job still runs,
  in the attempt it had (its container adopted, not restarted);
* their maxima. Goal: ``takeover_s`` <= 10 s.

Usage: ``benchmarks/takeover.py [--json] [--trials 3] [--db sqlite,postgres]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import httpx
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._stack import build_info, free_port, scratch_database

IMAGE = "gpudock-test/busybox:latest"
CONFIG = {
    "reconcile_interval": "0.5s",
    "schedule_interval": "0.5s",
    "executor": {"stop_grace": "1s"},
    "node": {"cpus": 64, "memory": "256GiB"},
}


def start(home: Path, db_url: str, standby: bool) -> tuple[subprocess.Popen[bytes], str]:
    """A server on ``db_url`` (``--standby`` if asked): its process and URL."""
    home.mkdir(parents=True)
    (home / "server.yaml").write_text(yaml.safe_dump(CONFIG))
    port = free_port()
    args = [
        str(Path(sys.executable).parent / "gpudock"),
        "server",
        "--port",
        str(port),
        "--config",
        str(home / "server.yaml"),
        "--db",
        db_url,
        "--emulate-gpus",
        "4xH100-80GB",
        "--log-level",
        "warning",
        "--api-workers",
        "1",
        *(["--standby"] if standby else []),
    ]
    log = (home / "server.log").open("wb")
    proc = subprocess.Popen(
        args, env={**os.environ, "GPUDOCK_HOME": str(home)}, stdout=log, stderr=log
    )
    return proc, f"http://127.0.0.1:{port}"


def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            found = check()
            if found:
                return found
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def healthy(url: str) -> bool:
    return httpx.get(url + "/healthz", timeout=1).status_code == 200


def trial(db_url: str, tmp: Path) -> dict[str, float]:
    leader, leader_url = start(tmp / "leader", db_url, standby=False)
    standby: subprocess.Popen[bytes] | None = None
    instance = None
    try:
        until(lambda: healthy(leader_url), 120, "the leader")
        instance = httpx.get(leader_url + "/healthz", timeout=5).json()["instance"]
        standby, standby_url = start(tmp / "standby", db_url, standby=True)
        until(lambda: b"standby:" in (tmp / "standby" / "server.log").read_bytes(), 60, "standby")
        token = (tmp / "leader" / "admin-token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        job = {"image": IMAGE, "command": ["sleep", "300"], "gpus": 1}
        made = httpx.post(leader_url + "/v1/jobs", json=job, headers=headers, timeout=30)
        job_id = made.json()["id"]
        show = f"/v1/jobs/{job_id}"

        def running(url: str) -> bool:
            found = httpx.get(url + show, headers=headers, timeout=2).json()
            return bool(found["state"] == "RUNNING" and found["attempt"] == 0)

        until(lambda: running(leader_url), 60, "the job to run")
        leader.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        leader.wait()
        until(lambda: healthy(standby_url), 60, "the standby to lead")
        took = time.monotonic() - killed
        until(lambda: running(standby_url), 60, "the job seen running by the new leader")
        adopted = time.monotonic() - killed
        httpx.post(standby_url + show + "/cancel", headers=headers, timeout=30)
        return {"takeover_s": round(took, 2), "adopted_s": round(adopted, 2)}
    finally:
        for proc in (leader, standby):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=30)
        if instance is not None:
            cleanup(instance)


def cleanup(instance: str) -> None:
    """Remove the containers the trial's installation left."""
    client = docker.from_env()
    try:
        label = f"gpudock.instance={instance}"
        for container in client.containers.list(all=True, filters={"label": label}):
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True)
    finally:
        client.close()


def run(kind: str, trials: int) -> dict[str, Any]:
    results = []
    for _ in range(trials):
        with (
            tempfile.TemporaryDirectory(prefix="gpudock-takeover-") as tmp,
            scratch_database(kind) as url,
        ):
            db_url = url or f"sqlite:///{Path(tmp) / 'gpudock.db'}"
            results.append(trial(db_url, Path(tmp)))
    return {
        "trials": results,
        "takeover_s_max": max(r["takeover_s"] for r in results),
        "adopted_s_max": max(r["adopted_s"] for r in results),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--db", default="sqlite,postgres", help="comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"benchmark": "takeover", **build_info(), "goal_takeover_s": 10.0}
    for kind in args.db.split(","):
        out[kind] = run(kind, args.trials)
    print(json.dumps(out, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
