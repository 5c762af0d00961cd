"""``gpudock events``: what it asks ``GET /v1/events`` and what it prints (no server needed)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from typer.testing import CliRunner

from gpudock.cli import events_cmd
from gpudock.cli import main as cli

PREEMPTED = {
    "id": 3, "at": 1_700_000_000.0, "type": "job.preempted", "job": 7, "user": "al",
    "queue": "default", "node": "gpu-0",
    "payload": {"preemptor": 9, "preemptor_user": "bo", "preemptor_queue": "vision",
                "preemptor_class": "urgent"},
}  # fmt: skip
REQUEUED = {
    "id": 4, "at": 1_700_000_001.0, "type": "job.state", "job": 7, "user": "al",
    "queue": "default", "node": None,
    "payload": {"from": "RUNNING", "to": "PENDING", "reason": "preempted by job 9"},
}  # fmt: skip


class FakeServer:
    """Answers pages from a list; ``polls`` records each request's params."""

    def __init__(self, pages: list[list[dict[str, Any]]]) -> None:
        self.pages = pages
        self.polls: list[dict[str, Any]] = []

    def request(self, method: str, path: str, params: dict[str, Any]) -> Any:
        assert (method, path) == ("GET", "/v1/events")
        self.polls.append(dict(params))
        events = self.pages.pop(0) if self.pages else []
        return {"events": events, "next": events[-1]["id"] if events else params["since"]}


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeServer:
    fake = FakeServer([[PREEMPTED], [REQUEUED]])
    monkeypatch.setattr(events_cmd, "Client", lambda: fake)
    return fake


def test_job_filter_reaches_the_server_and_events_print_one_per_line(server: FakeServer) -> None:
    result = CliRunner().invoke(cli.app, ["events", "--job", "7", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert server.polls == [{"since": 0, "limit": 500, "job": 7}]
    assert [json.loads(line)["id"] for line in result.output.splitlines()] == [3]


def test_follow_polls_with_the_cursor_until_interrupted(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(events_cmd.time, "sleep", sleep)
    args = ["events", "-f", "--job", "7", "--type", "job", "--interval", "0.5"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    assert [p["since"] for p in server.polls] == [0, 3, 4]
    assert server.polls[0]["type"] == ["job"]
    assert "preempted by job 9 (bo/vision, class urgent)" in result.output
    assert "RUNNING → PENDING: preempted by job 9" in result.output


def test_bad_output_and_interval_are_refused_before_any_request(server: FakeServer) -> None:
    for args in (["-o", "yaml"], ["--interval", "0"]):
        result = CliRunner().invoke(cli.app, ["events", *args])
        assert result.exit_code == 2, result.output
    assert server.polls == []


def test_the_command_module_imports_nothing_server_side() -> None:
    code = (
        "import sys; import gpudock.cli.events_cmd; "
        "bad = {'fastapi', 'uvicorn', 'docker', 'numpy', 'scipy'} & set(sys.modules); "
        "print(sorted(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_job_change_reads_as_what_was_done_by_whom() -> None:
    from gpudock.cli.events_cmd import summary

    held = {"type": "job.changed", "payload": {"action": "hold", "by": "alice"}}
    updated = {
        "type": "job.changed",
        "payload": {"action": "update", "by": "bob", "changes": {"gpus": 2}},
    }
    assert summary(held) == "hold by alice"
    assert summary(updated) == "update by bob: gpus=2"
