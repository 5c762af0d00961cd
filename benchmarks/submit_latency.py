#!/usr/bin/env python3
"""Submit-to-running latency of gpudock against a bare docker-py run.

Starts a real ``gpudock server`` (SQLite, one emulated H100) on the local
Docker engine and, alternating in one run:

* **gpudock**: from ``POST /v1/jobs`` to the container's ``State.StartedAt``
  (the engine's own clock on this host);
* **bare**: from docker-py ``containers.run(IMAGE, CMD, detach=True)`` to its
  ``StartedAt``;
* **bare_gpu**: the same with the NVIDIA device request gpudock sends.

Prints medians, p90s and ``ratio`` = gpudock median / bare median.
Usage: ``benchmarks/submit_latency.py [--json] [--samples 15] [--image IMAGE]``.
Needs a running dockerd (``scripts/lib.sh`` start_dockerd) and the image.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
import httpx
from _meta import build_info  # beside this script

ROOT = Path(__file__).resolve().parents[1]
CMD = ["sleep", "3600"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(home: Path, port: int) -> subprocess.Popen[bytes]:
    config = home / "server.yaml"
    config.write_text("executor:\n  stop_grace: 1s\n")
    gpudock = Path(sys.executable).parent / "gpudock"
    proc = subprocess.Popen(
        [
            str(gpudock),
            "server",
            "--port",
            str(port),
            "--emulate-gpus",
            "1xH100-80GB",
            "--config",
            str(config),
            "--log-level",
            "warning",
        ],
        env={**os.environ, "GPUDOCK_HOME": str(home)},
        stdout=(home / "server.log").open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        except httpx.TransportError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit(f"server did not start:\n{(home / 'server.log').read_text()}")


def started_at(client: Any, name: str) -> float | None:
    """The engine's StartedAt of a running container, as unix seconds."""
    try:
        state = client.api.inspect_container(name)["State"]
    except docker.errors.NotFound:
        return None
    if not state.get("Running"):
        return None
    stamp = state["StartedAt"]  # e.g. 2026-11-30T04:35:09.123456789Z
    whole, _, frac = stamp.rstrip("Z").partition(".")
    base = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    return base.timestamp() + float("0." + (frac or "0"))


def gpudock_sample(api: httpx.Client, client: Any, image: str) -> float:
    """Seconds from POST to the container running (the engine's StartedAt).

    Polls gently (every 20 ms) so the measurement does not load the server.
    Then cancels and waits for the GPU to be idle.
    """
    start = time.time()
    job = api.post("/v1/jobs", json={"image": image, "command": CMD, "gpus": 1}).json()
    stamp = None
    while stamp is None:
        current = api.get(f"/v1/jobs/{job['id']}").json()
        if current["state"] in ("FAILED", "CANCELLED", "LOST"):
            raise SystemExit(f"job {job['id']} ended during the benchmark: {current['reason']}")
        if current["container"]:
            stamp = started_at(client, current["container"])
        if stamp is None:
            time.sleep(0.02)
    elapsed = stamp - start
    api.post(f"/v1/jobs/{job['id']}/cancel")
    while api.get("/v1/gpus").json()[0]["exclusive_job"] is not None:
        time.sleep(0.02)
    return elapsed


def bare_sample(client: Any, image: str, gpu_uuid: str | None) -> float:
    """Seconds from calling ``containers.run(detach=True)`` to the engine's StartedAt."""
    kwargs: dict[str, Any] = {}
    if gpu_uuid:
        kwargs["device_requests"] = [
            docker.types.DeviceRequest(device_ids=[gpu_uuid], capabilities=[["gpu"]])
        ]
    start = time.time()
    container = client.containers.run(image, CMD, detach=True, **kwargs)
    stamp = started_at(client, container.id)
    container.remove(force=True)
    assert stamp is not None
    return stamp - start


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_s": round(statistics.median(ordered), 4),
        "p90_s": round(ordered[max(0, round(0.9 * len(ordered)) - 1)], 4),
        "min_s": round(ordered[0], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--image", default="gpudock-test/busybox:latest")
    args = parser.parse_args()
    client = docker.from_env()
    client.images.get(args.image)
    with tempfile.TemporaryDirectory(prefix="gpudock-bench-") as tmp:
        home, port = Path(tmp), free_port()
        server = start_server(home, port)
        token = (home / "admin-token").read_text().strip()
        api = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            timeout=30,
            headers={"Authorization": f"Bearer {token}"},
        )
        instance = api.get("/healthz").json()["instance"]
        try:
            uuid = api.get("/v1/gpus").json()[0]["uuid"]
            gpudock_sample(api, client, args.image)  # warm-up: first launch pays imports
            bare_sample(client, args.image, None)
            results: dict[str, list[float]] = {"gpudock": [], "bare": [], "bare_gpu": []}
            for _ in range(args.samples):
                results["gpudock"].append(gpudock_sample(api, client, args.image))
                results["bare"].append(bare_sample(client, args.image, None))
                results["bare_gpu"].append(bare_sample(client, args.image, uuid))
        finally:
            server.terminate()
            server.wait(timeout=30)
            label = f"gpudock.instance={instance}"
            for c in client.api.containers(all=True, filters={"label": label}):
                client.api.remove_container(c["Id"], force=True)
    out = {name: summary(values) for name, values in results.items()}
    report = {
        "benchmark": "submit_latency",
        "samples": args.samples,
        "image": args.image,
        "gpudock_median_s": out["gpudock"]["median_s"],
        "gpudock_p90_s": out["gpudock"]["p90_s"],
        "bare_median_s": out["bare"]["median_s"],
        "bare_p90_s": out["bare"]["p90_s"],
        "bare_gpu_median_s": out["bare_gpu"]["median_s"],
        "bare_gpu_p90_s": out["bare_gpu"]["p90_s"],
        "ratio": round(out["gpudock"]["median_s"] / out["bare"]["median_s"], 3),
        "ratio_vs_bare_gpu": round(out["gpudock"]["median_s"] / out["bare_gpu"]["median_s"], 3),
        "goal_ratio": 1.3,
        **build_info(),
    }
    print(json.dumps(report, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
