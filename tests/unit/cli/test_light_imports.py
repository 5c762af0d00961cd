"""Every client command stays light: no pydantic, and no rich unless it draws a table.

A client command runs against an unreachable server here, so each one takes its
error path, which must print plainly; ``rich`` loads only to draw a table.
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

CLIENT_COMMANDS = [
    ["jobs"],
    ["jobs", "--limit", "5", "--state", "PENDING"],
    ["show", "1"],
    ["why", "1"],
    ["cancel", "1"],
    ["gpus"],
    ["nodes"],
    ["queues"],
    ["logs", "1"],
    ["events"],
    ["token", "list"],
    ["token", "revoke", "1"],
    ["admin", "get"],
    ["submit", "--gpus", "1", "img"],
    ["jobs", "--start", "--expand"],
    ["submit", "--array", "0-3%2", "--after", "1", "--after-ok", "2", "img"],
    ["submit", "--follow", "img"],
    ["hold", "1"],
    ["release", "1"],
    ["requeue", "1"],
    ["update", "1", "--gpus", "2"],
    ["exec", "1", "--", "true"],
    ["registry", "list"],
    ["gpu", "cordon", "GPU-1"],
    ["gpu", "uncordon", "GPU-1"],
    ["mig", "plan", "--want", "1g.10gb=1"],
    ["registry", "logout", "registry.example.com:5000"],
    ["registry", "login", "registry.example.com", "--username", "u", "--password-stdin"],
]


@pytest.mark.parametrize("argv", CLIENT_COMMANDS, ids=" ".join)
def test_a_client_command_that_fails_to_connect_loads_neither_pydantic_nor_rich(
    argv: list[str],
) -> None:
    done = run_client(argv)

    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
    assert "cannot reach the gpudock server" in done.stderr


def test_exec_it_on_a_terminal_loads_neither_pydantic_nor_rich() -> None:
    master, slave = pty.openpty()  # -it refuses a stdin that is not a terminal
    try:
        done = run_client(["exec", "-it", "1", "sh"], stdin=slave)
    finally:
        os.close(master)
        os.close(slave)

    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
    assert "cannot reach the gpudock server" in done.stderr


def run_client(argv: list[str], stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    """``gpudock ARGV`` against an unreachable server; its last stdout line lists the
    heavy packages it imported."""
    code = (
        f"import sys; sys.argv = ['gpudock', *{argv!r}]\n"
        "from gpudock.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'rich', 'sqlalchemy'}))"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"GPUDOCK_URL": "http://127.0.0.1:9", "PATH": "/usr/bin:/bin"},
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        input="pw\n" if "--password-stdin" in argv else None,
    )
