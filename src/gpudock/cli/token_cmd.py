"""``gpudock token create|list|revoke``: the token lifecycle over ``/v1/tokens``.

Imports nothing server-side; rich loads only to draw the ``list`` table.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpudock.cli.common import Output, call, check_output, fail, note, out, print_json

if TYPE_CHECKING:
    from rich.table import Table

token_app = typer.Typer(help="Manage API tokens.", no_args_is_help=True)
STATE_STYLE = {"active": "green", "expired": "yellow", "revoked": "red"}


def when(at: float | None, never: str = "never") -> str:
    """Unix seconds as local ``YYYY-MM-DD HH:MM``; ``never`` for None."""
    return never if at is None else datetime.fromtimestamp(at).strftime("%Y-%m-%d %H:%M")


def tokens_table(tokens: list[dict[str, Any]]) -> Table:
    """One row per token: never its secret."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for col in ("ID", "NAME", "USER", "ROLE", "STATE", "CREATED", "EXPIRES", "LAST USED"):
        table.add_column(col, no_wrap=True)
    for t in tokens:
        state = t["state"]
        table.add_row(
            str(t["id"]),
            escape(t["name"] or "-"),
            escape(t["user"]),
            "admin" if t["admin"] else (f"node {t['node']}" if t.get("node") else "user"),
            f"[{STATE_STYLE.get(state, '')}]{state}[/]",
            when(t["created_at"]),
            when(t["expires_at"]),
            when(t["last_used_at"], "-"),
        )
    return table


@token_app.command("create")
def token_create(
    user: Annotated[
        str | None, typer.Option(help="user the token acts as (required unless --node)")
    ] = None,
    admin: Annotated[bool, typer.Option(help="make an admin token")] = False,
    node: Annotated[
        str | None, typer.Option(help="a node token: for that Swarm node's agent only")
    ] = None,
    expires: Annotated[
        str | None, typer.Option(help="lifetime, e.g. 30d or 12h; default: never expires")
    ] = None,
    name: Annotated[str | None, typer.Option(help="a label, e.g. laptop")] = None,
    output: Output = "table",
) -> None:
    """Create an API token (admin only). The secret is printed once; store it safely."""
    check_output(output)
    if user is None and node is None:
        fail("give --user (the user the token acts as), or --node for a node agent's token", 2)
    body: dict[str, Any] = {"user": user, "admin": admin}
    if node is not None:
        body["node"] = node
    if expires is not None:
        body["expires"] = expires
    if name is not None:
        body["name"] = name
    result = call("POST", "/v1/tokens", json=body)
    if output == "json":
        print_json(result)
        return
    sys.stdout.write(result["token"] + "\n")
    role = (
        "admin"
        if result["admin"]
        else ("agent of node " + result["node"] if result.get("node") else "user")
    )
    note(
        f"token {result['id']} for {result['user']} ({role}), expires: {when(result['expires_at'])}"
    )


@token_app.command("list")
def token_list(
    user: Annotated[str | None, typer.Option(help="only this user's tokens (admins)")] = None,
    output: Output = "table",
) -> None:
    """List tokens (yours; an admin sees everyone's), never their secrets."""
    check_output(output)
    params = {"user": user} if user is not None else {}
    tokens = call("GET", "/v1/tokens", params=params)
    if output == "json":
        print_json(tokens)
    elif not tokens:
        sys.stdout.write("no tokens\n")
    else:
        out.print(tokens_table(tokens))


@token_app.command("revoke")
def token_revoke(token_id: Annotated[int, typer.Argument(help="the token's ID")]) -> None:
    """Revoke a token now (yours; an admin may revoke anyone's)."""
    result = call("DELETE", f"/v1/tokens/{token_id}")
    sys.stdout.write(f"token {token_id} of {result['user']} revoked\n")
