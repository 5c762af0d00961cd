"""``submit --follow``'s exit code and ``exec``'s relay of the server's NDJSON stream."""

from __future__ import annotations

import base64
import json

import pytest

from gpudock.cli.control_cmd import EXEC_NO_CODE, relay
from gpudock.cli.watch_cmd import NO_EXIT_CODE, exit_code_of


@pytest.mark.parametrize(
    ("state", "code", "expected"),
    [
        ("SUCCEEDED", 0, 0),
        ("FAILED", 7, 7),
        ("FAILED", 137, 137),
        ("FAILED", None, NO_EXIT_CODE),  # never started: no container, no code
        ("FAILED", 0, NO_EXIT_CODE),  # stopped over max_runtime after a clean exit: not 0
        ("CANCELLED", 143, 143),
        ("CANCELLED", None, NO_EXIT_CODE),
        ("LOST", None, NO_EXIT_CODE),
    ],
)
def test_follow_exits_with_the_jobs_code_and_never_0_unless_it_succeeded(
    state: str, code: int | None, expected: int, capsys: pytest.CaptureFixture[str]
) -> None:
    job = {"id": 4, "state": state, "exit_code": code, "reason": "why"}

    assert exit_code_of(job) == expected
    assert capsys.readouterr().err == ("" if state == "SUCCEEDED" else f"job 4 {state}: why\n")


def line(**item: object) -> bytes:
    return json.dumps(item).encode() + b"\n"


def chunk(stream: str, data: bytes) -> bytes:
    return line(stream=stream, data=base64.b64encode(data).decode())


def test_relay_splits_stdout_from_stderr_across_chunk_boundaries(
    capfd: pytest.CaptureFixture[str],
) -> None:
    body = chunk("stdout", b"out\n") + chunk("stderr", b"err\n") + line(exit_code=3)

    code = relay([body[:7], body[7:30], body[30:]])

    assert code == 3
    assert capfd.readouterr() == ("out\n", "err\n")


def test_relay_without_an_exit_code_says_so() -> None:
    assert relay([chunk("stdout", b"")]) == EXEC_NO_CODE
    assert relay([line(exit_code=None)]) == EXEC_NO_CODE


def test_the_cli_knows_the_servers_end_of_stream_line() -> None:
    """``logs -f`` exits 1 on the line the server ends a cut follow with; the CLI keeps
    its own copy of it (it may not import the server's modules)."""
    from gpudock.cli.logs_cmd import STREAM_END as CLI
    from gpudock.services.job_logs import STREAM_END as SERVER

    assert CLI == SERVER


def test_a_stream_ended_by_the_server_says_why_and_gives_no_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stream = [
        line(stream="stdout", data=base64.b64encode(b"go\n").decode()),
        line(error="session ended: token revoked"),
        line(exit_code=None),
    ]
    assert relay(iter(stream)) == EXEC_NO_CODE
    assert capsys.readouterr().err == "error: session ended: token revoked\n"
