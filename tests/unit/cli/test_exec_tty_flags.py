"""``gpudock exec -it`` refuses, in one line and before any request, what it cannot do."""

from __future__ import annotations

import subprocess

from tests.kit.server import gpudock_bin

UNREACHABLE = {"GPUDOCK_URL": "http://127.0.0.1:9", "GPUDOCK_TOKEN": "x", "PATH": "/usr/bin:/bin"}


def gpudock(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [gpudock_bin(), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=UNREACHABLE,
        timeout=60,
    )


def test_it_without_a_terminal_is_refused_as_docker_does() -> None:
    done = gpudock("exec", "-it", "1", "sh")

    assert (done.returncode, done.stderr) == (
        1,
        "error: the input device is not a TTY: -it needs a terminal (drop -it to run a command)\n",
    )


def test_i_or_t_alone_is_refused_with_the_forms_that_work() -> None:
    for flag in ("-i", "-t"):
        done = gpudock("exec", flag, "1", "--", "cat")

        assert done.returncode == 2
        assert done.stderr == (
            "error: -i and -t go together here: `gpudock exec -it JOB sh` for a shell, "
            "or neither to run a command; see 'gpudock exec --help'\n"
        )
