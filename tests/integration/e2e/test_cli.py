"""The `gpudock` CLI against a real server: the commands users type."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import FAST_CONFIG, ServerProcess, gpudock_bin, wait_state

pytestmark = pytest.mark.docker


@pytest.fixture
def sqlite_server(make_server: object) -> ServerProcess:
    return make_server().start()  # type: ignore[operator]


def test_submit_run_show_logs_roundtrip(sqlite_server: ServerProcess) -> None:
    server = sqlite_server
    out = server.cli(
        "submit",
        "--gpus",
        "2",
        "--name",
        "hello",
        "--env",
        "WHO=cli",
        "--max-runtime",
        "1h",
        TEST_IMAGE,
        "--",
        "sh",
        "-c",
        "echo hi $WHO; echo gpus=$NVIDIA_VISIBLE_DEVICES",
    )
    job_id = int(out.stdout.strip())
    job = wait_state(server.api(), job_id, {"SUCCEEDED", "FAILED"})
    assert job["state"] == "SUCCEEDED" and job["spec"]["command"][0] == "sh"
    logs = server.cli("logs", str(job_id)).stdout
    assert logs.startswith("hi cli\ngpus=GPU-")
    assert logs.strip().removeprefix("hi cli\ngpus=").split(",") == job["gpus"]
    shown = server.cli("show", str(job_id)).stdout
    assert "SUCCEEDED" in shown and "exited with code 0" in shown and "RUNNING → SUCCEEDED" in shown
    table = server.cli("jobs").stdout
    assert "hello" in table and "SUCCEEDED" in table
    listed = json.loads(server.cli("jobs", "--output", "json").stdout)
    assert [j["id"] for j in listed] == [job_id]


def test_submit_from_yaml_and_its_errors(sqlite_server: ServerProcess, tmp_path: Path) -> None:
    server = sqlite_server
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"image: {TEST_IMAGE}\ncommand: [sh, -c, 'echo $MODE']\ngpus: 1\n"
        "gpu_memory: 20GiB\nenv: {MODE: yaml}\nqueue: vision\npriority: 5\n"
    )
    job_id = int(server.cli("submit", "-f", str(spec)).stdout)
    job = wait_state(server.api(), job_id, {"SUCCEEDED"})
    assert (job["queue"], job["priority"], job["spec"]["gpu_memory"]) == ("vision", 5, 20 * 1024**3)
    spec.write_text(f"image: {TEST_IMAGE}\ngpus: 1\ngpu_mem: 20GiB\n")
    bad = server.cli("submit", "-f", str(spec), check=False)
    assert bad.returncode == 2 and "gpu_mem: unknown field" in bad.stderr
    bad = server.cli("submit", "--gpu-memory", "20XB", TEST_IMAGE, check=False)
    assert bad.returncode == 2 and "unknown size unit 'XB'" in bad.stderr
    bad = server.cli("submit", "--gpus", "64", TEST_IMAGE, check=False)
    assert bad.returncode == 1  # a valid spec that can never run
    assert re.search(r"needs 64 GPUs; node \S+ has only 4", bad.stderr), bad.stderr
    assert "Traceback" not in bad.stderr


def test_inventory_cancel_and_tokens(sqlite_server: ServerProcess) -> None:
    server = sqlite_server
    gpus = server.cli("gpus").stdout
    assert gpus.count("(emulated)") == 4
    assert "available" in server.cli("nodes").stdout
    job_id = server.cli("submit", "--gpus", "1", TEST_IMAGE, "--", "sleep", "300").stdout.strip()
    wait_state(server.api(), int(job_id), {"RUNNING"})
    cancelled = server.cli("cancel", job_id).stdout
    assert f"job {job_id} CANCELLED: cancelled by admin" in cancelled
    token = server.cli("token", "create", "--user", "carol").stdout.strip()
    assert token.startswith("gpd_")
    assert server.cli("jobs", token=token).stdout.strip() == "no jobs"
    missing = server.cli("show", "777", check=False)
    assert missing.returncode == 1 and "job 777 not found" in missing.stderr


def test_cli_explains_an_unreachable_server(sqlite_server: ServerProcess) -> None:
    server = sqlite_server
    server.stop()
    result = server.cli("jobs", check=False)
    assert result.returncode == 1
    assert "cannot reach the gpudock server" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--db", "bogus"], "is not a database URL"),
        (["--db", "postgresql+psycopg://nobody@127.0.0.1:1/x"], "cannot open the database"),
        (["--emulate-gpus", "4xH100"], "4xH100"),
        (["--log-level", "loud"], "--log-level must be one of"),
        (["--port", "99999"], "invalid value for '--port'"),
    ],
)
def test_server_start_errors_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    env = {**os.environ, "GPUDOCK_HOME": str(tmp_path)}
    result = subprocess.run(
        [gpudock_bin(), "server", "--port", "1", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0], result.stderr
    if args[0] != "--db":  # refused before the database is opened (or created)
        assert not (tmp_path / "gpudock.db").exists()


@pytest.mark.parametrize("value", ["0", "two", "-1", "1.5", "65"])
def test_a_bad_api_workers_value_is_a_one_line_usage_error(tmp_path: Path, value: str) -> None:
    env = {**os.environ, "GPUDOCK_HOME": str(tmp_path)}
    result = subprocess.run(
        [gpudock_bin(), "server", "--port", "1", "--api-workers", value],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: --api-workers must be a whole number from 1 to 64 (API processes); got {value!r}"
    ]
    assert not list(tmp_path.iterdir()), "refused before anything was made"


def test_placement_flags_and_inventory_columns(make_server: Any) -> None:
    config = {
        **FAST_CONFIG,
        "node": {"labels": {"zone": "b"}, "taints": ["spot"], "cpus": 8, "memory": "64GiB"},
    }
    server = make_server(config=config).start()
    job_id = server.cli(
        "submit",
        "--gpus", "2",
        "--selector", "zone=b",
        "--toleration", "spot",
        "--topology", "nvlink",
        TEST_IMAGE, "--", "true",
    ).stdout.strip()  # fmt: skip

    shown = server.cli("show", job_id).stdout
    assert "node selector  zone=b" in shown
    assert "tolerations    spot" in shown
    assert "topology       nvlink" in shown
    nodes = server.cli("nodes").stdout
    assert "LABELS" in nodes and "zone=b" in nodes and "spot:NoSchedule" in nodes
    assert "/8" in nodes  # CPUS: used/offered
    header, *rows = server.cli("gpus").stdout.splitlines()
    at = header.index("NUMA")
    assert header[at:].split()[:2] == ["NUMA", "NVLINK"]
    assert [row[at:].split()[:2] for row in rows] == [["0", "0"]] * 2 + [["1", "0"]] * 2
    bad = server.cli("submit", "--topology", "pcie", TEST_IMAGE, check=False)
    assert bad.returncode == 2 and "topology: Input should be 'nvlink' or 'numa'" in bad.stderr


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        (
            "node:\n  taints: ['gpu=a:NoExecute']\n",
            "node.taints: taint 'gpu=a:NoExecute': effect must be NoSchedule",
        ),
        (
            "scheduler:\n  policies:\n    scorers: [{name: binpack, options: {cpu_aware: 'no'}}]\n",
            "score policy 'binpack' option 'cpu_aware' takes a bool, got 'no'",
        ),
    ],
)
def test_a_bad_config_stops_the_server_with_one_line(
    tmp_path: Path, yaml: str, message: str
) -> None:
    config = tmp_path / "server.yaml"
    config.write_text(yaml)
    env = {**os.environ, "GPUDOCK_HOME": str(tmp_path)}
    result = subprocess.run(
        [gpudock_bin(), "server", "--port", "1", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert message in " ".join(result.stderr.split())
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "gpudock.db").exists()  # checked before the database is touched
