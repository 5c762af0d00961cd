"""The token and queue tables of the CLI: what each caller sees, and never a secret."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from gpudock.cli.render import queues_table
from gpudock.cli.token_cmd import tokens_table


def text(table: Any) -> str:
    console = Console(width=250, record=True)
    console.print(table)
    return console.export_text()


def token(**over: Any) -> dict[str, Any]:
    base = {
        "id": 3,
        "name": "laptop",
        "user": "alice",
        "admin": False,
        "state": "active",
        "created_at": 1_800_000_000.0,
        "created_by": "admin",
        "expires_at": None,
        "last_used_at": None,
        "revoked_at": None,
    }
    return {**base, **over}


def test_the_token_table_names_every_column_and_never_a_secret() -> None:
    shown = text(
        tokens_table([token(token="gpd_secret"), token(id=4, admin=True, state="revoked")])
    )
    assert shown.split()[:9] == [
        "ID", "NAME", "USER", "ROLE", "STATE", "CREATED", "EXPIRES", "LAST", "USED"
    ]  # fmt: skip
    assert "gpd_secret" not in shown
    assert "never" in shown and "revoked" in shown and "admin" in shown


def queue(**over: Any) -> dict[str, Any]:
    zero = {"gpus": 0}
    base = {
        "name": "vision",
        "cohort": None,
        "weight": 1.0,
        "running_jobs": 0,
        "pending_jobs": 1,
        "usage": zero,
        "guarantee": zero,
        "limit": {"gpus": None},
        "borrowed": zero,
        "fair_share": zero,
        "effective_share": 0.0,
    }
    return {**base, **over}


def test_admins_see_members_and_groups_users_their_standing() -> None:
    admin = text(
        queues_table(
            {
                "queues": [
                    queue(members=["group:vision", "dave"], max_pending_per_user=2),
                    queue(name="open", members=None, max_pending_per_user=None),
                ],
                "groups": {"vision": ["alice", "bob"]},
            }
        )
    )
    assert "MEMBERS" in admin and "group:vision,dave" in admin and "everyone" in admin
    assert "groups: vision=alice,bob" in admin and "YOU" not in admin
    you = {"member": True, "may_submit": True, "pending": 1, "max_pending": 2}
    user = text(
        queues_table(
            {
                "queues": [
                    queue(you=you),
                    queue(name="closed", you={**you, "member": False, "may_submit": False}),
                    queue(name="open", you={**you, "max_pending": None}),
                ]
            }
        )
    )
    assert "MEMBERS" not in user
    assert "1/2 pending" in user and "not a member" in user and "1/∞ pending" in user
