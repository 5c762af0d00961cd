"""`gpudock server --log-format json` on a real server: every line of its output is one
JSON object, and a request's id reaches the log records it causes."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import gpudock_bin, wait_for, wait_state

pytestmark = pytest.mark.docker


def log_records(log_text: str) -> list[dict[str, Any]]:
    """Each line of the server's output as JSON (the kit's own start banners left out)."""
    records = []
    for line in log_text.splitlines():
        if not line.strip() or line.startswith("===== start"):
            continue
        records.append(json.loads(line))  # fails the test on any line that is not JSON
    return records


def test_json_logs_carry_time_level_logger_message_job_and_request_id(make_server: Any) -> None:
    server = make_server(env={"GPUDOCK_LOG_FORMAT": "json"}).start()
    api = server.api()
    response = api.post(
        "/v1/jobs",
        json={"image": TEST_IMAGE, "command": ["true"], "gpus": 1},
        headers={"X-Request-ID": "team-test-42"},
    )
    assert response.status_code == 201, response.text
    assert response.headers["X-Request-ID"] == "team-test-42"
    job_id = response.json()["id"]
    generated = api.get("/v1/jobs").headers["X-Request-ID"]
    assert len(generated) == 32, "a request without an id gets a fresh one"
    wait_state(api, job_id, {"SUCCEEDED"})

    def launched() -> list[dict[str, Any]]:
        return [
            r
            for r in log_records(server.log_path.read_text())
            if r.get("job") == job_id and "running in" in r["message"]
        ]

    wait_for(launched, 30, "the launch record")
    records = log_records(server.log_path.read_text())
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record), record
        assert datetime.fromisoformat(record["time"]).utcoffset() is not None
    submitted = [r for r in records if r["message"].startswith(f"job {job_id} submitted")]
    assert submitted == [
        {
            "time": submitted[0]["time"],
            "level": "INFO",
            "logger": "gpudock.jobs",
            "message": f"job {job_id} submitted by admin to queue default",
            "job": job_id,
            "request_id": "team-test-42",
            "process": "api-1",  # the API worker that took the submit
        }
    ]
    assert all(r["process"] == "controller" for r in launched()), "the controller launches"
    assert any(r.get("request_id") == generated for r in records), "the request's own line"
    assert any(r["logger"].startswith("uvicorn") for r in records), "uvicorn logs through it"
    assert not any(server.admin_token in json.dumps(r) for r in records), "never the secret"


def test_a_bad_log_format_and_a_json_start_error_are_one_line(tmp_path: Path) -> None:
    def start(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [gpudock_bin(), "server", "--port", "1", *args],
            env={**os.environ, "GPUDOCK_HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )

    bad = start("--log-format", "xml")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "error: --log-format must be one of text, json; got 'xml'"
    failed = start("--log-format", "json", "--db", "bogus")
    assert failed.returncode == 2
    (record,) = [json.loads(line) for line in failed.stderr.splitlines()]
    assert record["level"] == "CRITICAL"
    assert record["message"].startswith("--db 'bogus' is not a database URL")
