"""Shared by the HTTP benchmarks: a real ``gpudock server``, a scratch database, an audit.

Not a benchmark itself (``results.py`` lists ``benchmarks/*.py``, so this module's
name starts with ``_``). Each benchmark starts its own server process on the
local dockerd with emulated GPUs, on SQLite or on a database created on
``GPUDOCK_TEST_PG_URL`` (dropped after), and tears both down.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "gpudock-test/busybox:latest"
HOLDS = ("ALLOCATED", "STARTING", "RUNNING")


def build_info() -> dict[str, Any]:
    """``build`` (pure/compiled), ``commit`` and ``cpus``; ``benchmarks/_meta.py`` if present."""
    try:
        from benchmarks import _meta  # type: ignore[attr-defined]

        info: dict[str, Any] = _meta.build_info()
        return info
    except (ImportError, AttributeError):
        pass
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    import gpudock.scheduler.cycle  # noqa: F401  (loads what the server runs)
    from gpudock._native import compiled as is_compiled

    compiled = is_compiled()
    return {
        "build": "compiled" if compiled else "pure",
        "commit": commit,
        "cpus": os.cpu_count(),
        "load": list(os.getloadavg()),
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def scratch_database(kind: str) -> Iterator[str | None]:
    """None for SQLite (the server's default file); else a fresh PostgreSQL database URL."""
    if kind == "sqlite":
        yield None
        return
    base = os.environ.get("GPUDOCK_TEST_PG_URL")
    if not base:
        raise SystemExit("postgres: set GPUDOCK_TEST_PG_URL")
    name = f"gpudock_bench_{secrets.token_hex(4)}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


class Server:
    """A ``gpudock server`` subprocess with ``gpus`` emulated H100s and ``api_workers``
    API processes (None: the server's default).

    ``config`` replaces top-level keys of the server config below (e.g. a
    ``node`` without ``cpus``, so that the host's cores bound the jobs); ``args`` are
    more ``gpudock server`` options (``--standby``). Without ``wait``, the caller calls
    ``ready`` once it expects the server to serve (a standby, after the leader died).
    """

    def __init__(
        self,
        home: Path,
        db_url: str | None,
        gpus: int,
        config: dict[str, Any] | None = None,
        api_workers: int | None = None,
        args: tuple[str, ...] = (),
        wait: bool = True,
    ) -> None:
        self.home = home
        self.db_url = db_url or f"sqlite:///{home / 'gpudock.db'}"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "reconcile_interval": "0.5s",
            "schedule_interval": "0.5s",
            "executor": {"stop_grace": "1s"},
            "node": {"cpus": 1024, "memory": "4TiB"},  # GPUs, not the host's cores, bound it
            **(config or {}),
        }
        (home / "server.yaml").write_text(yaml.safe_dump(config))
        command = [
            str(Path(sys.executable).parent / "gpudock"),
            "server",
            "--port",
            str(self.port),
            "--config",
            str(home / "server.yaml"),
            "--db",
            self.db_url,
            "--emulate-gpus",
            f"{gpus}xH100-80GB",
            "--log-level",
            "warning",
        ]
        if api_workers is not None:
            command += ["--api-workers", str(api_workers)]
        self.log = home / "server.log"
        self.proc = subprocess.Popen(
            [*command, *args],
            env={**os.environ, "GPUDOCK_HOME": str(home)},
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.token, self.instance = "", ""
        if wait:
            self.ready()

    def ready(self, timeout: float = 120.0) -> None:
        """Wait until the server answers ``/healthz`` (``SystemExit`` if it exits or
        does not within ``timeout``), then read its admin token (if it made one) and
        instance, and let its start-up work settle."""
        home = self.home
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"server exited:\n{self.log.read_text()[-4000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    break
            time.sleep(0.1)
        else:
            self.stop()
            raise SystemExit(f"server did not start:\n{self.log.read_text()[-4000:]}")
        token = home / "admin-token"  # a follower's home has none: it made no token
        self.token = token.read_text().strip() if token.exists() else ""
        self.instance = httpx.get(self.url + "/healthz", timeout=5).json()["instance"]
        self.settle()

    def settle(self, cores: float = 0.1, timeout: float = 30.0) -> None:
        """Wait (up to ``timeout``) until the server uses under ``cores`` over half a second:
        its start-up work (imports its first cycle needs, the first reconcile) is done."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = self.cpu_seconds()
            time.sleep(0.5)
            if self.cpu_seconds() - before < cores * 0.5:
                return

    def processes(self) -> dict[str, int]:
        """The server's processes by name: ``controller`` (the one started) and each API
        worker by the name it runs as (``api-1``, ...: ``ps`` shows ``gpudock-api-1``)."""
        found = {"controller": self.proc.pid}
        for pid in children(self.proc.pid):
            with contextlib.suppress(OSError):
                name = Path(f"/proc/{pid}/comm").read_text().strip()
                found[name.removeprefix("gpudock-")] = pid
        return found

    def cpu_by_process(self) -> dict[str, float]:
        """CPU seconds (user + system, every thread) each of ``processes`` has used so far."""
        out = {}
        for name, pid in self.processes().items():
            with contextlib.suppress(OSError):
                out[name] = process_cpu(pid)
        return out

    def cpu_seconds(self) -> float:
        """CPU seconds every process of the server has used so far."""
        return sum(self.cpu_by_process().values())

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=60,
            **kwargs,
        )

    def stop(self, docker_client: Any = None) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if docker_client is not None:
            label = f"gpudock.instance={self.instance}"
            for container in docker_client.containers.list(all=True, filters={"label": label}):
                with contextlib.suppress(Exception):
                    container.remove(force=True)


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, every thread) process ``pid`` has used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # after the command name: field 3 onwards
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from ``/proc``), by pid."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return sorted(found)


def machine_cpu() -> dict[str, float]:
    """Seconds of CPU the whole machine spent so far, from ``/proc/stat``: ``busy``
    (user, system and interrupts: all but idle, I/O wait and steal) and ``steal``
    (taken by the hypervisor)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]
    steal = fields[7] if len(fields) > 7 else 0
    return {"busy": (sum(fields[:8]) - idle - steal) / tick, "steal": steal / tick}


def all_jobs(api: httpx.Client) -> list[dict[str, Any]]:
    """Every job, through the paged listing."""
    jobs: list[dict[str, Any]] = []
    params: dict[str, Any] = {"limit": 1000}
    while True:
        response = api.get("/v1/jobs", params=params)
        response.raise_for_status()
        jobs += response.json()
        cursor = response.headers.get("X-Next-Cursor")
        if not cursor:
            return jobs
        params["before"] = int(cursor)


def double_booked(db_url: str) -> int:
    """Pairs of jobs that held one GPU at overlapping times (from the state history).

    A job holds its GPUs from entering ALLOCATED until it leaves ALLOCATED,
    STARTING and RUNNING; an attempt's GPUs are the job's recorded ones
    (the benchmarks submit with ``retries: 0``, so one attempt per job).
    """
    engine = create_engine(db_url)
    with engine.connect() as conn:
        gpus = {
            job_id: uuids
            for job_id, uuids in conn.execute(
                text("SELECT id, gpu_uuids FROM jobs WHERE gpu_uuids IS NOT NULL")
            )
        }
        events = conn.execute(
            text("SELECT job_id, at, from_state, to_state FROM job_events ORDER BY id")
        ).all()
    engine.dispose()
    spans: dict[int, list[float]] = {}
    for job_id, at, before, after in events:
        if after == "ALLOCATED":
            spans[job_id] = [at, float("inf")]
        elif before in HOLDS and after not in HOLDS and job_id in spans:
            spans[job_id][1] = at
    by_gpu: dict[str, list[tuple[float, float, int]]] = defaultdict(list)
    for job_id, (start, end) in spans.items():
        uuids = gpus.get(job_id) or []
        if isinstance(uuids, str):  # a JSON column read back as text
            uuids = json.loads(uuids)
        for uuid in uuids:
            by_gpu[uuid].append((start, end, job_id))
    overlaps = 0
    for holds in by_gpu.values():
        holds.sort()
        latest_end = float("-inf")
        for start, end, _ in holds:
            if start < latest_end:
                overlaps += 1
            latest_end = max(latest_end, end)
    return overlaps
