#!/usr/bin/env python3
"""The GPU-memory watchdog's cost and speed: CPU at steady state, and detection latency.

The node GPU monitor (``gpudock.gpus.node_monitor``) runs in a child process
against the NVML stand-in (``tests/kit/fake_nvml``, built here with gcc),
exactly as a server runs it: its own thread, a pass every
``gpus.watchdog.interval`` (0.5 s). The GPU processes are real: ``--gpus`` times
``--processes`` ``sleep`` processes, grouped four to a job, each job's four in
a cgroup named like a container's (a 64-hex id), so every pass maps PID →
``/proc/<pid>/cgroup`` → container → job for real. (Without the rights to make
cgroups the processes stay where they are and every one is a stray;
``attributed`` says which.)

1. **CPU**: the child's CPU time (``/proc/<pid>/stat``) over ``--seconds`` of
   steady state, as a percentage of one core. Goal: < 2 % at 8 GPUs x 20.
2. **Latency**: ``--kills`` times, at a random moment within a pass interval,
   one job's process is written into the stand-in's state above the job's
   limit; the time from that write to the sink's SIGKILL of the process is one
   sample. Goal: ≤ 1 s.

``python benchmarks/watchdog.py --json`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from _meta import build_info  # noqa: E402

GIB = 1024**3
PER_JOB = 4
LIMIT = 8 * GIB


def main() -> None:
    args = parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    result = run(args.gpus, args.processes, args.seconds, args.kills)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=20, help="per GPU")
    parser.add_argument("--seconds", type=float, default=10.0, help="steady state measured")
    parser.add_argument("--kills", type=int, default=10, help="latency samples")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args()


def run(gpus: int, per_gpu: int, seconds: float, kills: int) -> dict[str, Any]:
    """Both measurements; every process made here is gone when it returns."""
    from tests.kit.fake_nvml import FakeNvml, build_fake_nvml, fake_gpu

    with (
        tempfile.TemporaryDirectory(prefix="gpudock-watchdog-") as tmp,
        processes(gpus, per_gpu) as (jobs, attributed),
    ):
        fake = FakeNvml(build_fake_nvml(Path(tmp) / "lib").parent, Path(tmp) / "state")
        fake.state["gpus"] = [fake_gpu(i) for i in range(gpus)]
        for job in jobs:
            fake.state["gpus"][job["gpu"]]["processes"] += [
                {"pid": pid, "usedGpuMemory": GIB} for pid in job["pids"]
            ]
        fake.write()
        with monitor_child(fake, jobs) as (proc, lines):
            wait_line(lines, "started", 30)
            time.sleep(1.0)  # the first passes look every container up once
            cpu = cpu_share(proc.pid, seconds)
            latencies = [kill_one(fake, jobs[i % len(jobs)], lines) for i in range(kills)]
    return {
        "benchmark": "watchdog",
        "gpus": gpus,
        "processes": gpus * per_gpu,
        "jobs": len(jobs),
        "attributed": attributed,
        "interval_s": 0.5,
        "cpu_percent_of_core": round(cpu * 100, 3),
        "latency_ms": {
            "p50": round(statistics.median(latencies) * 1000, 1),
            "max": round(max(latencies) * 1000, 1),
            "samples": len(latencies),
        },
        "goals": {"latency_le_1s": max(latencies) <= 1.0, "cpu_lt_2pct": cpu < 0.02},
        "machine": "shared" if os.environ.get("GPUDOCK_BENCH_IDLE") != "1" else "idle",
        **build_info(),
    }


@contextlib.contextmanager
def processes(gpus: int, per_gpu: int) -> Iterator[tuple[list[dict[str, Any]], bool]]:
    """``sleep`` processes, ``PER_JOB`` to a job, each job's in a container-like cgroup."""
    procs: list[subprocess.Popen[bytes]] = []
    groups: list[Path] = []
    jobs: list[dict[str, Any]] = []
    try:
        for gpu in range(gpus):
            for first in range(0, per_gpu, PER_JOB):
                batch = [
                    subprocess.Popen(["sleep", "3600"])
                    for _ in range(min(PER_JOB, per_gpu - first))
                ]
                procs += batch
                container = uuid.uuid4().hex + uuid.uuid4().hex
                group = container_cgroup(container, [p.pid for p in batch])
                if group is not None:
                    groups.append(group)
                jobs.append({"id": len(jobs) + 1, "gpu": gpu, "container": container,
                             "pids": [p.pid for p in batch]})  # fmt: skip
        yield jobs, len(groups) == len(jobs)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for group in groups:
            with contextlib.suppress(OSError):
                group.rmdir()
        if groups:
            with contextlib.suppress(OSError):
                groups[0].parent.rmdir()


def container_cgroup(container: str, pids: list[int]) -> Path | None:
    """A cgroup ``gpudock-bench-<pid>/<container>`` holding ``pids``, or None."""
    root = Path("/sys/fs/cgroup")
    base = root if (root / "cgroup.controllers").exists() else root / "pids"
    group = base / f"gpudock-bench-{os.getpid()}" / container
    try:
        group.mkdir(parents=True, exist_ok=True)
        for pid in pids:
            (group / "cgroup.procs").write_text(str(pid))
    except OSError:
        with contextlib.suppress(OSError):
            group.rmdir()
        return None
    return group


@contextlib.contextmanager
def monitor_child(fake: Any, jobs: list[dict[str, Any]]) -> Iterator[tuple[Any, Any]]:
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake.lib_dir)}
    env["GPUDOCK_FAKE_NVML_STATE"] = str(fake.state_path)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), env.get("PYTHONPATH", "")])
    setup = {"gpus": [g["uuid"] for g in fake.state["gpus"]], "jobs": jobs}
    proc = subprocess.Popen(
        [sys.executable, __file__, "--child", json.dumps(setup)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    lines = iter(proc.stdout.readline, "")
    try:
        yield proc, lines
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_line(lines: Iterator[str], event: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    for line in lines:
        data: dict[str, Any] = json.loads(line)
        if data["event"] == event:
            return data
        if time.monotonic() > deadline:
            break
    raise RuntimeError(f"the monitor child never said {event!r}")


def cpu_share(pid: int, seconds: float) -> float:
    """The process's CPU time over ``seconds`` of wall time, as a fraction of one core."""

    def ticks() -> int:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime

    hz = os.sysconf("SC_CLK_TCK")
    before, started = ticks(), time.monotonic()
    time.sleep(seconds)
    return (ticks() - before) / hz / (time.monotonic() - started)


def kill_one(fake: Any, job: dict[str, Any], lines: Iterator[str]) -> float:
    """Push one of ``job``'s live processes past the job's limit; seconds to its kill."""
    pid = job["pids"].pop()
    gpu = fake.state["gpus"][job["gpu"]]
    time.sleep(random.uniform(0.0, 0.5))  # any phase of the monitor's passes
    for proc in gpu["processes"]:
        if proc["pid"] == pid:
            proc["usedGpuMemory"] = LIMIT + GIB
    fake.write()
    written = time.monotonic()
    killed = wait_line(lines, "killed", 10)
    gpu["processes"] = [p for p in gpu["processes"] if p["pid"] != pid]
    fake.write()
    if killed["pid"] != pid:
        raise RuntimeError(f"the watchdog killed {killed['pid']}, not {pid}")
    return float(killed["at"]) - written


def child(setup: dict[str, Any]) -> None:
    """The monitor, as a server runs it; its sink SIGKILLs an offender's process."""
    from gpudock.gpus.config import GpuNodeConfig
    from gpudock.gpus.node_monitor import NodeGpuMonitor
    from gpudock.gpus.watchdog import Assignment, Offence

    logging.basicConfig(level=logging.ERROR)  # the offences are the parent's to count
    gpus: list[str] = setup["gpus"]
    assignments = [Assignment(j["id"], (gpus[j["gpu"]],), LIMIT) for j in setup["jobs"]]
    by_container = {j["container"]: j["id"] for j in setup["jobs"]}
    out = threading.Lock()

    def say(**data: Any) -> None:
        with out:
            sys.stdout.write(json.dumps(data) + "\n")
            sys.stdout.flush()

    class Sink:
        def assignments(self) -> list[Assignment]:
            return assignments

        def job_of_container(self, container_id: str) -> int | None:
            return by_container.get(container_id)

        def over_limit(self, offence: Offence) -> None:
            with contextlib.suppress(OSError):
                os.kill(offence.pid, signal.SIGKILL)
            say(event="killed", pid=offence.pid, at=time.monotonic())

        def stray(self, stray: Any, killed: bool) -> None:
            pass

        def gpu_fault(self, fault: Any) -> None:
            pass

        def sharing(self, mode: Any, mps: Any) -> None:
            pass

    monitor = NodeGpuMonitor(GpuNodeConfig(), Sink(), gpus)
    monitor.start()
    say(event="started", watching=monitor.watching)
    sys.stdin.read()  # until the parent closes it
    monitor.stop()


if __name__ == "__main__":
    main()
