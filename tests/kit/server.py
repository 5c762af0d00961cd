"""Run a real ``gpudock server`` process for end-to-end tests.

The server is the installed console script in a subprocess, with its own
``GPUDOCK_HOME``, port and database, so tests exercise exactly what users run
(including ``kill -9``). ``api()`` returns an httpx client holding the admin
token the server created on first start.

A server runs ``api_workers`` API processes beside its controller; the kit's
default is 1 (``DEFAULT_API_WORKERS``: the cheapest start, and every request
still crosses from a worker to the controller's process). Tests of the
several-worker contracts start their own (``tests/integration/e2e/test_api_workers.py``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

FAST_CONFIG: dict[str, Any] = {
    "reconcile_interval": "0.5s",
    "schedule_interval": "1s",
    "executor": {"stop_grace": "2s"},
    # Explicit and large: every job takes ``job_defaults`` (1 CPU, 2GiB) unless it says, and
    # the host's own count (2 cores in CI) would queue tests that run several jobs at once.
    "node": {"cpus": 64, "memory": "256GiB"},
}
TERMINAL = {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}
DEFAULT_API_WORKERS = 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def gpudock_bin() -> str:
    return str(Path(sys.executable).parent / "gpudock")


class ServerProcess:
    """One ``gpudock server`` subprocess; restartable on the same home and database."""

    def __init__(
        self,
        home: Path,
        db_url: str | None = None,
        emulate: str | None = "4xH100-80GB",
        config: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        args: tuple[str, ...] = (),
        api_workers: int = DEFAULT_API_WORKERS,
    ) -> None:
        self.home = home
        self.host = host
        self.args = args
        self.api_workers = api_workers
        self.db_url = db_url
        self.emulate = emulate
        self.port = free_port()
        self.url = f"http://{host}:{self.port}"
        self.config_path = home / "server.yaml"
        home.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(yaml.safe_dump(config or FAST_CONFIG))
        self.env = {**os.environ, "GPUDOCK_HOME": str(home), **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = home / "server.log"
        self.starts = 0

    def start(self, wait: bool = True) -> ServerProcess:
        args = [
            gpudock_bin(),
            "server",
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.args,
            "--config",
            str(self.config_path),
            "--log-level",
            "debug",
            "--api-workers",
            str(self.api_workers),
        ]
        if self.db_url:
            args += ["--db", self.db_url]
        if self.emulate:
            args += ["--emulate-gpus", self.emulate]
        self.starts += 1
        log = self.log_path.open("ab")
        log.write(f"\n===== start {self.starts} =====\n".encode())
        log.flush()
        self.proc = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"server not healthy after {timeout}s:\n{self.log()}")

    def kill9(self) -> None:
        """SIGKILL the server (its controller; the API workers die with it)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def workers(self) -> dict[str, int]:
        """The running API workers' pids by name (``api-1``, ...), from ``/proc``: the
        server's children named ``gpudock-api-N``."""
        assert self.proc is not None
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name, _, rest = stat.partition("(")[2].rpartition(")")
            fields = rest.split()
            mine = name.startswith("gpudock-api-") and fields[1] == str(self.proc.pid)
            if mine and fields[0] != "Z":  # not a zombie the server has yet to reap
                found[name.removeprefix("gpudock-")] = int(entry.name)
        return found

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:] if self.log_path.exists() else ""

    def log_all(self) -> str:
        """The whole server log (``log()`` is its tail)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    @property
    def admin_token(self) -> str:
        return (self.home / "admin-token").read_text().strip()

    def api(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            timeout=30,
            headers={"Authorization": f"Bearer {token or self.admin_token}"},
        )

    def cli(
        self, *args: str, token: str | None = None, check: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "GPUDOCK_URL": self.url, "GPUDOCK_TOKEN": token or self.admin_token}
        result = subprocess.run(
            [gpudock_bin(), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            input=stdin,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"gpudock {' '.join(args)} failed: {result.stderr}{result.stdout}")
        return result


def wait_for(predicate: Callable[[], Any], timeout: float = 60, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def job_state(api: httpx.Client, job_id: int) -> dict[str, Any]:
    response = api.get(f"/v1/jobs/{job_id}")
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def wait_state(
    api: httpx.Client, job_id: int, states: set[str], timeout: float = 60
) -> dict[str, Any]:
    result: dict[str, Any] = wait_for(
        lambda: (j := job_state(api, job_id))["state"] in states and j,
        timeout,
        f"job {job_id} to reach {sorted(states)}",
    )
    return result


def wait_settled(api: httpx.Client, job_id: int, timeout: float = 60) -> dict[str, Any]:
    """The job once it runs, or once it is PENDING with its pending reasons given."""
    result: dict[str, Any] = wait_for(
        lambda: (
            (
                (j := job_state(api, job_id))["state"] == "RUNNING"
                or (j["state"] == "PENDING" and j["pending_reasons"])
            )
            and j
        ),
        timeout,
        f"job {job_id} to run or to get a pending reason",
    )
    return result


def submit(api: httpx.Client, **spec: Any) -> int:
    response = api.post("/v1/jobs", json=spec)
    assert response.status_code == 201, response.text
    return int(response.json()["id"])
