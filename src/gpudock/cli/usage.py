"""The command tree's own behaviour: one-line usage errors, ``-h``, plain help text.

``GpudockGroup`` is the root command's class (``typer.Typer(cls=...)``):

* a usage error (an unknown option, a missing or extra argument, a bad value)
  is one line on stderr, ``error: MESSAGE; see 'gpudock CMD --help'``, exit 2,
  instead of click's three-line ``Usage:``/``Try:``/``Error:`` block (a
  command without arguments still prints its help, exit 2);
* help text is plain: the reST of docstrings (````-f````) reads ```-f```.

``-h`` is ``--help`` everywhere through the root's ``context_settings``
(``HELP_OPTIONS``), which every subcommand's context inherits. Light: typer only.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Any

from typer._click.core import Command
from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
from typer.core import TyperGroup
from typer.exceptions import Abort

HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}
_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)


def plain(text: str | None) -> str | None:
    """``text`` without reST literals: ````-f```` becomes ```-f```."""
    return None if text is None else _LITERAL.sub(r"`\1`", text)


def usage_line(exc: UsageError, path: str = "gpudock") -> str:
    """``error: MESSAGE; see 'gpudock CMD --help'``: one line, the message's first
    letter lowered as the CLI's own errors are. ``path`` is the command's when the
    error does not know it (the option parser's own errors)."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    message = message[:1].lower() + message[1:]
    if exc.ctx is not None:
        path = exc.ctx.command_path
    return f"error: {message}; see '{path} --help'"


def command_path(root: Command, name: str, args: Sequence[str]) -> str:
    """``gpudock token create``: ``name`` and the leading ``args`` that name subcommands."""
    words, command = [name], root
    for arg in args:
        found = getattr(command, "commands", {}).get(arg)
        if found is None:
            break
        words.append(arg)
        command = found
    return " ".join(words)


class GpudockGroup(TyperGroup):
    """The root ``gpudock`` group: plain help for every command below it, and usage
    errors as one line (module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _plain_help(self)

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """As click's, but a ``UsageError`` is one line (exit 2); other click errors are
        ``error: MESSAGE`` with their own exit code."""
        try:
            result = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except NoArgsIsHelpError as exc:
            if not standalone_mode:
                raise
            exc.show()
            sys.exit(exc.exit_code)
        except UsageError as exc:
            if not standalone_mode:
                raise
            words = sys.argv[1:] if args is None else args
            _say(usage_line(exc, command_path(self, prog_name or "gpudock", words)))
            sys.exit(exc.exit_code)
        except ClickException as exc:
            if not standalone_mode:
                raise
            _say(f"error: {exc.format_message()}")
            sys.exit(exc.exit_code)
        except Abort:
            if not standalone_mode:
                raise
            _say("error: aborted")
            sys.exit(1)
        if not standalone_mode:
            return result
        sys.exit(result if isinstance(result, int) else 0)


def _say(line: str) -> None:
    if sys.stderr.isatty() and line.startswith("error:"):
        line = "\033[31merror:\033[0m" + line.removeprefix("error:")
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _plain_help(command: Command) -> None:
    """Strip reST literals from the help of ``command``, its options and every subcommand."""
    command.help = plain(command.help)
    command.short_help = plain(command.short_help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = plain(param.help)  # type: ignore[attr-defined]
    for sub in getattr(command, "commands", {}).values():  # a group's subcommands
        _plain_help(sub)


__all__ = ["HELP_OPTIONS", "GpudockGroup", "plain", "usage_line"]
