"""Regression guards: the HTTP benchmarks, small, against the real components.

``benchmarks/submit_storm.py``, ``benchmarks/dispatch.py``,
``benchmarks/api_floor.py`` and ``benchmarks/gpu_first.py`` run as users run
them (subprocess, ``--json``) on the real dockerd with emulated GPUs, SQLite
and PostgreSQL. The assertions are on the audit, never on time: every submit
acknowledged and stored once, no GPU held by two jobs at once, no pending job
without a reason, every dispatched job SUCCEEDED (a GPU job behind a CPU-only
backlog too), every floor request answered and its CPU read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import PG_URL, require

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [pytest.mark.docker, pytest.mark.slow]


def run_benchmark(script: str, *args: str) -> dict[str, Any]:
    env = {**os.environ, "GPUDOCK_TEST_PG_URL": PG_URL}
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:] + result.stdout[-2000:]
    data: dict[str, Any] = json.loads(result.stdout)
    print(json.dumps(data, indent=2))
    return data


def assert_storm_accounted_for(run: dict[str, Any]) -> None:
    assert run["acknowledged"] == run["submits"], run["failures"]
    assert run["stored"] == run["submits"]
    assert (run["lost"], run["duplicated"], run["double_booked"]) == (0, 0, 0)
    assert run["pending_without_reason"] == 0
    assert run["states"].get("SUCCEEDED", 0) > 0  # jobs really ran during the storm
    for cores in (run["idle_cores"], run["storm_cores"]):  # each process's CPU was read
        assert {"controller", "api-1"} <= set(cores), cores
    assert run["storm_cores"]["api-1"] > 0


def test_a_submit_storm_on_sqlite_loses_nothing_and_double_books_nothing(docker: Any) -> None:
    data = run_benchmark("submit_storm.py", "--submits", "500", "--db", "sqlite", "--idle", "1")
    assert_storm_accounted_for(data["sqlite"])


@pytest.mark.postgres
def test_a_submit_storm_on_postgresql_loses_nothing_and_double_books_nothing(
    docker: Any,
) -> None:
    import psycopg

    try:
        psycopg.connect(PG_URL.replace("+psycopg", ""), connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        require("PostgreSQL", str(exc))
    data = run_benchmark("submit_storm.py", "--submits", "300", "--db", "postgres", "--idle", "1")
    assert_storm_accounted_for(data["postgres"])


def test_dispatch_runs_every_job_once_beside_a_bare_loop(docker: Any) -> None:
    data = run_benchmark("dispatch.py", "--jobs", "100", "--timeout", "300")
    assert data["gpudock"]["states"] == {"SUCCEEDED": 100}
    assert data["gpudock"]["double_booked"] == 0
    assert data["bare_makespan_s"] > 0 and data["ratio"] is not None


def test_the_api_floor_answers_every_request_and_measures_the_server(docker: Any) -> None:
    data = run_benchmark(
        "api_floor.py", "--requests", "200", "--concurrency", "16", "--api-workers", "2"
    )
    assert data["requests"] == 200 and data["per_s"] > 0
    assert data["server_cpu_ms_per_request"] > 0  # the server's CPU was read, not assumed
    assert 0 < data["server_cores"] <= data["machine_busy_cores"] + 0.1  # a part of it
    assert set(data["processes"]) == {"controller", "api-1", "api-2"}
    bare = data["bare"]  # the bare FastAPI app, measured by the same client in the same run
    assert bare["requests"] == 200 and bare["server_cpu_ms_per_request"] > 0
    ratio = data["server_cpu_ms_per_request"] / bare["server_cpu_ms_per_request"]
    assert data["cpu_ratio"] == pytest.approx(ratio, abs=0.01)


def test_gpu_jobs_behind_a_cpu_only_backlog_all_run_once(docker: Any) -> None:
    data = run_benchmark(
        "gpu_first.py", "--cpu-jobs", "24", "--gpu-jobs", "4", "--gpus", "2",
        "--variants", "cpus_not_counted", "--timeout", "300",
    )  # fmt: skip
    run = data["cpus_not_counted"]
    assert run["states"] == {"SUCCEEDED": 28}
    assert run["double_booked"] == 0
    assert run["gpu"]["to_running_median_s"] is not None  # every GPU job's start was read
