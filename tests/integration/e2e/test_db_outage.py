"""A PostgreSQL outage under load: clients see 201, 2xx or 503, never 500, and nothing is lost.

The test owns its PostgreSQL (its own cluster on a free port), stops it for a
few seconds while clients submit and list jobs, and starts it again. The
shared test database (``GPUDOCK_TEST_PG_URL``) is never touched.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from tests.conftest import require
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, free_port, wait_for, wait_state

pytestmark = [pytest.mark.docker, pytest.mark.postgres]

OUTAGE_SECONDS = 6


class OwnPostgres:
    """A throwaway PostgreSQL cluster this test may stop and start at will."""

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bins or shutil.which("runuser") is None or os.geteuid() != 0:
            require("PostgreSQL", "its server binaries and root (runuser) are needed")
        self.bin = Path(bins[-1])
        self.dir = Path(tempfile.mkdtemp(prefix="gpudock-pg-outage-"))
        shutil.chown(self.dir, "postgres", "postgres")
        self.dir.chmod(0o700)
        self.port = free_port()
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        self._as_postgres(
            "initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "postgres", "--no-sync"
        )

    def _as_postgres(self, tool: str, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.bin / tool), *args],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def start(self) -> None:
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(
            "pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "log"),
            "-o", options, "-w", "start",
        )  # fmt: skip

    def stop(self) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.bin / "pg_ctl"), "-D",
             str(self.dir / "data"), "-m", "immediate", "-w", "stop"],
            capture_output=True, timeout=60,
        )  # fmt: skip
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    pg = OwnPostgres()
    pg.start()
    yield pg
    pg.destroy()


@dataclass
class Load:
    """Clients that submit and list jobs until told to stop, recording every answer."""

    url: str
    token: str
    statuses: list[tuple[str, int]] = field(default_factory=list)
    acknowledged: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, client_number: int) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as api:
            n = 0
            while not self.stop.is_set():
                n += 1
                spec = {"image": TEST_IMAGE, "command": ["true"], "name": f"c{client_number}-{n}"}
                self._call("POST /v1/jobs", lambda spec=spec: api.post("/v1/jobs", json=spec))
                self._call("GET /v1/jobs", lambda: api.get("/v1/jobs"))
                self._call("GET /healthz", lambda: api.get("/healthz"))
                time.sleep(0.05)

    def _call(self, what: str, request: Callable[[], httpx.Response]) -> None:
        try:
            response = request()
        except httpx.HTTPError as exc:
            with self.lock:
                self.errors.append(f"{what}: {exc!r}")
            return
        with self.lock:
            self.statuses.append((what, response.status_code))
            if what == "POST /v1/jobs" and response.status_code == 201:
                self.acknowledged.append(int(response.json()["id"]))
            if response.status_code == 503:
                assert response.headers.get("retry-after"), f"{what}: 503 without Retry-After"


def test_a_database_outage_gives_503s_not_500s_and_loses_nothing(
    make_server: Callable[..., ServerProcess], own_postgres: OwnPostgres
) -> None:
    server = make_server(db_url=own_postgres.url, config=FAST_CONFIG).start()
    load = Load(server.url, server.admin_token)
    clients = [threading.Thread(target=load.run, args=(i,)) for i in range(3)]
    for client in clients:
        client.start()
    try:
        time.sleep(2)
        before_outage = len(server.log_all())
        own_postgres.stop()
        time.sleep(1)
        health = httpx.get(server.url + "/healthz", timeout=10)
        time.sleep(OUTAGE_SECONDS - 1)
        still_down = len(server.log_all())
        own_postgres.start()
        time.sleep(3)
    finally:
        load.stop.set()
        for client in clients:
            client.join(timeout=60)

    assert health.status_code == 503, health.text
    assert health.json()["db"] == "unavailable"
    assert health.headers["retry-after"]

    codes = {code for _, code in load.statuses}
    assert not load.errors, load.errors[:5]
    assert codes <= {200, 201, 503}, sorted(codes)
    assert 503 in codes, "the outage was never seen: the test proved nothing"
    assert load.acknowledged, "no submit succeeded at all"
    assert "unhandled error" not in server.log_all(), "an outage error reached the 500 handler"
    assert_one_line_per_change(server.log_all(), before_outage, still_down)

    # Back to normal without a restart: every acknowledged job exists and runs.
    wait_for(lambda: httpx.get(server.url + "/healthz").status_code == 200, 30, "recovery")
    with server.api() as api:
        for job_id in load.acknowledged:
            assert api.get(f"/v1/jobs/{job_id}").status_code == 200, f"job {job_id} lost"
        after = api.post("/v1/jobs", json={"image": TEST_IMAGE, "command": ["true"]})
        assert after.status_code == 201
        wait_state(api, int(after.json()["id"]), {"SUCCEEDED"}, timeout=60)


def assert_one_line_per_change(log: str, before_outage: int, still_down: int) -> None:
    """Each process (the controller and the API worker) logs the outage once when it
    starts and once when the database answers again (after it really was back), with
    no trace and no per-job failure."""
    during = log[before_outage:]
    for process in ("[controller]", "[api-1]"):
        lines = [line for line in during.splitlines() if process in line]
        said = "\n".join(lines)
        assert said.count("database unavailable (") == 1, f"{process}:\n{said[-3000:]}"
        assert said.count("database reachable again") == 1, f"{process}:\n{said[-3000:]}"
        back = next(i for i, line in enumerate(lines) if "database reachable again" in line)
        # not early: written at or after the end of the log as it was while still down
        assert log.index(lines[back], before_outage) >= still_down
    assert "Traceback" not in during and "failed unexpectedly" not in during
