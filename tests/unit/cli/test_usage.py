"""The command tree as a whole: ``-h`` everywhere, plain help, one-line usage errors.

No server: these are the CLI's own (``cli/usage.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gpudock.cli.main import app


def command_paths() -> Iterator[list[str]]:
    """Every command and group below ``gpudock``, as its words."""

    def walk(command: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


PATHS = list(command_paths())


def test_the_tree_is_walked() -> None:
    assert {"submit", "cancel", "token create", "admin apply"} <= {" ".join(p) for p in PATHS}


def test_h_is_help() -> None:
    short = CliRunner().invoke(app, ["token", "create", "-h"])
    long = CliRunner().invoke(app, ["token", "create", "--help"])

    assert short.exit_code == 0 and short.output == long.output
    assert "-h, --help" in short.output


@pytest.mark.parametrize("path", PATHS, ids=lambda p: " ".join(p) or "gpudock")
def test_h_works_everywhere_and_help_is_plain_text(path: list[str]) -> None:
    result = CliRunner().invoke(app, [*path, "-h"])

    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: gpudock")
    assert "``" not in result.output  # no reST literals in what users read


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["cancel"], "error: missing argument 'JOB_ID'; see 'gpudock cancel --help'"),
        (
            ["submit", "--gpu", "2", "img"],
            "error: no such option: --gpu (Possible options: --cpus, --gpu-model, --gpus); "
            "see 'gpudock submit --help'",
        ),
        (["logs", "x"], "error: invalid value for 'job_id': 'x' is not a valid integer; "
                        "see 'gpudock logs --help'"),
        (["nosuch"], "error: no such command 'nosuch'; see 'gpudock --help'"),
        (["token", "create", "--user"],
         "error: option '--user' requires an argument; see 'gpudock token create --help'"),
        (["jobs", "-o", "xml"],
         "error: --output must be 'table' or 'json', got 'xml'; see 'gpudock jobs --help'"),
        (["hold", "4x"], "error: job id '4x' must be a number, or an array's tasks as ID_INDEX, "
                         "ID[FIRST-LAST,...] or ID[*] (e.g. 42, 40_3, 40[0-3], 40[*]); "
                         "see 'gpudock hold --help'"),
    ],
)  # fmt: skip
def test_a_usage_error_is_one_error_line_with_a_hint_and_exit_2(args: list[str], line: str) -> None:
    result = CliRunner().invoke(app, args)

    assert result.exit_code == 2
    assert result.output == line + "\n"


def test_a_group_without_a_command_prints_its_help() -> None:
    result = CliRunner().invoke(app, ["token"])

    assert result.exit_code == 2
    assert result.output.startswith("Usage: gpudock token")
