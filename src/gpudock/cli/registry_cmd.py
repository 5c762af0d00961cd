"""``gpudock registry login|list|logout``: your own logins to private registries.

Your jobs' pulls from a registry use your login to it (else the server's, if
the admin configured one). The password goes to the server once and is never
shown again. Imports nothing server-side; rich loads only to draw the table.
"""

from __future__ import annotations

import getpass
import sys
from typing import Annotated
from urllib.parse import quote

import typer

from gpudock.cli.common import Output, call, check_output, fail, note, out, print_json, usage
from gpudock.cli.token_cmd import when

registry_app = typer.Typer(
    help="Log in to private registries for your jobs' pulls.", no_args_is_help=True
)

RegistryArg = Annotated[
    str, typer.Argument(help="host[:port] as images name it, e.g. registry.example.com:5000")
]


def registry_path(registry: str) -> str:
    """``/v1/registries/REGISTRY``; a scheme or a path is refused here with one line."""
    scheme, sep, _ = registry.partition("://")
    if sep:
        fail(f"registry {registry!r} must be host[:port], without '{scheme}://'", 2)
    if "/" in registry:
        fail(f"registry {registry!r} must be host[:port], without a path", 2)
    return "/v1/registries/" + quote(registry, safe=":[]")


def read_password(registry: str, from_stdin: bool) -> str:
    """The password from stdin (``--password-stdin``, one trailing newline dropped)
    or from a prompt that does not echo."""
    if from_stdin:
        password = sys.stdin.read().removesuffix("\n").removesuffix("\r")
    else:
        try:
            password = getpass.getpass(f"Password for {registry}: ")
        except EOFError:
            password = ""
    if not password:
        fail("no password given (type one, or pipe it with --password-stdin)", 2)
    return password


@registry_app.command("login")
def registry_login(
    registry: RegistryArg,
    username: Annotated[
        str | None, typer.Option("--username", "-u", help="default: asked for")
    ] = None,
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="read the password from stdin")
    ] = False,
) -> None:
    """Store your login to REGISTRY on the server (it replaces an earlier one)."""
    path = registry_path(registry)
    if username is None:
        if password_stdin:
            usage("--password-stdin needs --username")
        username = input(f"Username for {registry}: ").strip()
    password = read_password(registry, password_stdin)
    result = call("PUT", path, json={"username": username, "password": password})
    note(f"logged in to {result['registry']} as {result['username']}")


@registry_app.command("list")
def registry_list(output: Output = "table") -> None:
    """Your registry logins (never their passwords)."""
    check_output(output)
    logins = call("GET", "/v1/registries")
    if output == "json":
        print_json(logins)
    elif not logins:
        sys.stdout.write("no registry logins\n")
    else:
        from rich.markup import escape
        from rich.table import Table

        table = Table(box=None, header_style="bold")
        for col in ("REGISTRY", "USERNAME", "STORED"):
            table.add_column(col, no_wrap=True)
        for item in logins:
            table.add_row(
                escape(item["registry"]), escape(item["username"]), when(item["created_at"])
            )
        out.print(table)


@registry_app.command("logout")
def registry_logout(registry: RegistryArg) -> None:
    """Remove your login to REGISTRY from the server."""
    result = call("DELETE", registry_path(registry))
    note(f"logged out of {result['registry']}")
