"""What every client command shares: errors, the API call, plain and rich output.

Light on purpose: a client command (``jobs``, ``submit``, ...) must answer in a
fraction of a second, so a command module imports at its top only the standard
library, ``typer`` and this module (and ``gpudock.cli.client``). ``rich`` loads
on the first use of ``out``/``err`` (``LazyConsole``) or of ``render``; anything
of the server (SQLAlchemy, FastAPI, docker, numpy, ...) only inside the command
that needs it (``server``, ``simulate``). ``tests/unit/cli/test_light_imports.py``
holds every registered command to this.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, cast

import typer

from gpudock.cli.client import Client, ClientError

if TYPE_CHECKING:
    from rich.console import Console

Output = Annotated[str, typer.Option("--output", "-o", help="table or json")]


class LazyConsole:
    """A ``rich.console.Console`` made (and ``rich`` imported) on first use."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._kwargs)
        return getattr(self._console, name)


def lazy_console(stderr: bool = False) -> Console:
    """stdout: as wide as the terminal, 200 columns into a pipe; stderr: soft-wrapped."""
    if stderr:
        return cast("Console", LazyConsole(stderr=True, soft_wrap=True))
    return cast("Console", LazyConsole(width=None if sys.stdout.isatty() else 200))


out = lazy_console()
err = lazy_console(stderr=True)


def note(message: str) -> None:
    """One plain line on stderr (no rich): progress and state notes."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def fail(message: str, code: int = 1) -> NoReturn:
    """``error: MESSAGE`` on stderr (red on a terminal), then exit ``code``."""
    prefix = "\033[31merror:\033[0m" if sys.stderr.isatty() else "error:"
    note(f"{prefix} {message}")
    raise typer.Exit(code)


def usage(message: str) -> NoReturn:
    """A usage error found by a command itself: one line, ``error: MESSAGE; see 'gpudock
    CMD --help'``, exit 2, as click's own (``gpudock.cli.usage``)."""
    from typer._click.exceptions import UsageError
    from typer._click.globals import get_current_context

    raise UsageError(message, ctx=get_current_context(silent=True))


def call(method: str, path: str, **kwargs: Any) -> Any:
    """One API request; an error exits (2 for a 422, else 1) with the server's message."""
    try:
        return Client().request(method, path, **kwargs)
    except ClientError as exc:
        fail(exc.message, exc.exit_code)


def print_json(data: Any) -> None:
    """``-o json``: indented JSON on stdout, unhighlighted (fast for long lists);
    times as ISO 8601 with a timezone (``gpudock.cli.jsontime``)."""
    sys.stdout.write(json_text(data) + "\n")


def json_text(data: Any) -> str:
    """``data`` as ``-o json`` prints it."""
    from gpudock.cli.jsontime import iso_times

    return json.dumps(iso_times(data), indent=2, ensure_ascii=False)


def check_output(output: str) -> None:
    if output not in ("table", "json"):
        usage(f"--output must be 'table' or 'json', got {output!r}")


def parse_pairs(items: list[str] | None, what: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            usage(f"{what} {item!r} must look like KEY=VALUE")
        pairs[key] = value
    return pairs
