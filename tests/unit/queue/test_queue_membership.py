"""Queue membership: ``members`` and ``groups`` in the config, and who may submit where."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from gpudock.config import format_validation_error, load_config
from gpudock.core.errors import Forbidden, InvalidInput
from gpudock.queue import QueuesConfig
from gpudock.queue.membership import is_member, members_of
from gpudock.services.queue_access import add_standing, check_member
from gpudock.store.tokens import Principal

CONFIG = QueuesConfig.model_validate(
    {
        "groups": {"vision": ["alice", "bob"], "empty": []},
        "queues": [
            {"name": "vision", "members": ["group:vision", "dave"], "max_pending_per_user": 3},
            {"name": "nobody", "members": ["group:empty"]},
            {"name": "open"},
        ],
    }
)


def error(data: object) -> str:
    with pytest.raises(ValidationError) as info:
        QueuesConfig.model_validate(data)
    return format_validation_error(info.value)


def test_members_are_users_and_expanded_groups() -> None:
    assert members_of(CONFIG, "vision") == {"alice", "bob", "dave"}
    assert members_of(CONFIG, "nobody") == frozenset()
    assert members_of(CONFIG, "open") is None
    assert members_of(CONFIG, "undeclared") is None


def test_a_queue_without_members_is_open_to_everyone() -> None:
    assert is_member(CONFIG, "open", "carol")
    assert is_member(CONFIG, "undeclared", "carol")
    assert is_member(CONFIG, "vision", "bob") and is_member(CONFIG, "vision", "dave")
    assert not is_member(CONFIG, "vision", "carol")
    assert not is_member(CONFIG, "nobody", "alice")


def test_a_non_member_is_forbidden_naming_the_queue_but_admins_pass() -> None:
    check_member(Principal("alice", False), "vision", CONFIG)
    check_member(Principal("root", True), "nobody", CONFIG)
    with pytest.raises(Forbidden) as caught:
        check_member(Principal("carol", False), "vision", CONFIG)
    assert caught.value.status_code == 403
    assert caught.value.message == (
        "user 'carol' is not a member of queue 'vision'; "
        "ask an admin to add you (or a group of yours) to its members"
    )


def test_an_unknown_group_is_refused_naming_its_path() -> None:
    message = error(
        {
            "groups": {"vision": ["alice"]},
            "queues": [{"name": "a"}, {"name": "b", "members": ["alice", "group:nlp"]}],
        }
    )
    assert message == (
        "(root): queues[1].members[1]: queue 'b' names unknown group 'nlp' "
        "(declared groups: vision)"
    )
    assert "declared groups: none; declare it under groups" in error(
        {"queues": [{"name": "a", "members": ["group:x"]}]}
    )


def test_the_server_config_refuses_an_unknown_group_with_its_full_path(tmp_path: Path) -> None:
    path = tmp_path / "server.yaml"
    queues = {"queues": [{"name": "vision", "members": ["group:vison"]}]}
    path.write_text(yaml.safe_dump({"scheduler": {"queues": queues}}))
    with pytest.raises(InvalidInput) as caught:
        load_config(path)
    assert caught.value.message == (
        f"config {path}: scheduler.queues: queues[0].members[0]: queue 'vision' names "
        "unknown group 'vison' (declared groups: none; declare it under groups)"
    )


def test_bad_member_and_group_names_are_refused() -> None:
    assert error({"queues": [{"name": "a", "members": ["al ice"]}]}) == (
        "queues.0.members.0: user 'al ice' must be 1-64 letters, digits, '_', '.', "
        "'@', '-', starting with a letter or digit, or 'group:NAME'"
    )
    assert "'alice' is listed twice" in error(
        {"queues": [{"name": "a", "members": ["alice", "alice"]}]}
    )
    assert "group name must be" in error({"queues": [{"name": "a", "members": ["group:"]}]})
    assert "groups.vision[1]: user 'b b' must be" in error({"groups": {"vision": ["a", "b b"]}})
    assert "group name must be" in error({"groups": {"-x": []}})


def test_max_pending_per_user_is_at_least_one() -> None:
    assert "greater than or equal to 1" in error(
        {"queues": [{"name": "a", "max_pending_per_user": 0}]}
    )
    assert CONFIG.queue("vision").max_pending_per_user == 3
    assert CONFIG.queue("open").max_pending_per_user is None


def _report() -> dict[str, object]:
    names = ("vision", "nobody", "open")
    return {"queues": [{"name": n} for n in names]}


def test_users_see_their_own_standing_and_never_the_members() -> None:
    report = add_standing(_report(), CONFIG, Principal("alice", False), {"vision": 2})
    rows = {q["name"]: q for q in report["queues"]}  # type: ignore[attr-defined]
    assert rows["vision"]["you"] == {
        "user": "alice",
        "member": True,
        "may_submit": True,
        "pending": 2,
        "max_pending": 3,
    }
    assert rows["nobody"]["you"]["may_submit"] is False
    assert all("members" not in row for row in rows.values()) and "groups" not in report


def test_admins_see_members_as_configured_and_the_groups() -> None:
    report = add_standing(_report(), CONFIG, Principal("root", True), {})
    rows = {q["name"]: q for q in report["queues"]}  # type: ignore[attr-defined]
    assert rows["vision"]["members"] == ["group:vision", "dave"]
    assert rows["open"]["members"] is None
    assert rows["nobody"]["you"] == {
        "user": "root",
        "member": False,
        "may_submit": True,
        "pending": 0,
        "max_pending": None,
    }
    assert report["groups"] == {"vision": ["alice", "bob"], "empty": []}
