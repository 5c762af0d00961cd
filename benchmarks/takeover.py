#!/usr/bin/env python3
"""Takeover: how long a ``--standby`` server takes to lead after ``kill -9`` of the leader.

For each database (``--db``: SQLite, and PostgreSQL from ``GPUDOCK_TEST_PG_URL``)
and each of ``--trials``: a leader ``gpudock server`` (4 emulated GPUs) and a
``--standby`` server on the same database, on the local dockerd; one job
(``sleep``, 1 GPU) runs on the leader; the leader is killed with SIGKILL (its
API workers die with it). Prints per database:

* ``takeover_s``: from the kill to the standby's ``/healthz`` saying ``leader``
  (on PostgreSQL it served the API as a ``follower`` before; on SQLite it did not
  serve);
* ``adopted_s``: from the kill to the standby answering that the job still runs,
  in the attempt it had (its container adopted, not restarted);
* their maxima. Goal: ``takeover_s`` <= 10 s.

Usage: ``benchmarks/takeover.py [--json] [--trials 3] [--db sqlite,postgres]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._stack import Server, build_info, scratch_database

IMAGE = "gpudock-test/busybox:latest"


def until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
            found = check()
            if found:
                return found
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def leads(url: str) -> bool:
    return bool(httpx.get(url + "/healthz", timeout=1).json()["role"] == "leader")


def trial(db_url: str, tmp: Path) -> dict[str, float]:
    """One leader, one standby, one running job, one kill: the two delays."""
    (tmp / "leader").mkdir()
    (tmp / "standby").mkdir()
    leader = Server(tmp / "leader", db_url, 4, api_workers=1)
    standby = Server(tmp / "standby", db_url, 4, api_workers=1, args=("--standby",), wait=False)
    try:
        until(lambda: b"standby:" in standby.log.read_bytes(), 60, "the standby to wait")
        headers = {"Authorization": f"Bearer {leader.token}"}
        job = {"image": IMAGE, "command": ["sleep", "300"], "gpus": 1}
        made = httpx.post(leader.url + "/v1/jobs", json=job, headers=headers, timeout=30)
        show = f"/v1/jobs/{made.json()['id']}"

        def running(url: str) -> bool:
            found = httpx.get(url + show, headers=headers, timeout=2).json()
            return bool(found["state"] == "RUNNING" and found["attempt"] == 0)

        until(lambda: running(leader.url), 60, "the job to run")
        leader.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        leader.proc.wait()
        until(lambda: leads(standby.url), 60, "the standby to lead")
        took = time.monotonic() - killed
        until(lambda: running(standby.url), 60, "the job seen running by the new leader")
        adopted = time.monotonic() - killed
        httpx.post(standby.url + show + "/cancel", headers=headers, timeout=30)
        return {"takeover_s": round(took, 2), "adopted_s": round(adopted, 2)}
    finally:
        client = docker.from_env()
        try:
            standby.stop()
            leader.stop(client)  # the installation's containers, by its instance label
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
