"""Every ``gpudock`` command of the README's tour parses: a renamed or removed flag,
or a command that no longer exists, breaks this test rather than a reader's first hour.

Each command runs with ``--help`` right after its command words, so options are
parsed (an unknown one is a usage error) but nothing runs and no server is asked.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

from gpudock.cli.main import app

README = Path(__file__).resolve().parents[3] / "README.md"


def tour_commands(markdown: str) -> list[list[str]]:
    """The ``gpudock`` commands of the first ``bash`` block after ``## A short tour``:
    continuation lines joined, comments dropped, ``;``/``&``/``|`` separating commands."""
    section = markdown.split("## A short tour", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block is not None, "the tour has no bash block"
    text = block.group(1).replace("\\\n", " ")
    commands: list[list[str]] = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for token in [*lexer, ";"]:
            if token and set(token) <= set(";&|"):
                if words[:1] == ["gpudock"]:
                    commands.append(words[1:])
                words = []
            else:
                words.append(token)
    return commands


def with_help(args: list[str]) -> list[str]:
    """``args`` with ``--help`` after its command words (``token create --help …``)."""
    command: Any = typer.main.get_command(app)
    depth = 0
    while depth < len(args) and args[depth] in getattr(command, "commands", {}):
        command = command.commands[args[depth]]
        depth += 1
    return [*args[:depth], "--help", *args[depth:]]


COMMANDS = tour_commands(README.read_text())


def test_the_tour_is_read() -> None:
    names = {" ".join(c[:2]) if c[0] in ("token", "admin", "registry") else c[0] for c in COMMANDS}
    assert len(COMMANDS) >= 25
    assert {"server", "submit", "cancel", "hold", "release", "simulate", "token create"} <= names


def test_every_tour_command_parses() -> None:
    failures = []
    for args in COMMANDS:
        result = CliRunner().invoke(app, with_help(args))
        if result.exit_code != 0:
            failures.append(f"gpudock {shlex.join(args)}: {result.output.strip()}")
    assert failures == []


def test_a_renamed_flag_would_fail() -> None:
    """The check above can fail: a flag the CLI does not have is a usage error."""
    (args,) = tour_commands("## A short tour\n```bash\ngpudock submit --gpu 2 IMAGE\n```\n")
    result = CliRunner().invoke(app, with_help(args))

    assert result.exit_code == 2 and "no such option: --gpu" in result.output
