"""Who may give a job which priority, and which jobs may preempt (``services.priority``)."""

from __future__ import annotations

from typing import Any

import pytest

from gpudock.config import SchedulerConfig
from gpudock.core.errors import Forbidden, InvalidInput
from gpudock.core.job import JobSpec
from gpudock.services.priority import resolve_priority
from gpudock.store.tokens import Principal

ALICE = Principal(user="alice", is_admin=False)
BOB = Principal(user="bob", is_admin=False)
ADMIN = Principal(user="admin", is_admin=True)

CONFIG = SchedulerConfig.model_validate(
    {
        "priority_classes": [
            {"name": "batch", "value": -10, "preempt": False},
            {"name": "urgent", "value": 100, "preempt": True, "users": ["bob"]},
            {"name": "vision-rush", "value": 50, "preempt": True, "queues": ["vision"]},
        ],
        "queues": {
            "queues": [
                {"name": "vision", "default_priority": 5, "max_user_priority": 20},
                {"name": "nlp", "default_priority": 3},
            ]
        },
    }
)


def resolve(principal: Principal, **spec: Any) -> tuple[int, bool]:
    resolved, can_preempt = resolve_priority(
        JobSpec.model_validate({"image": "img", **spec}), principal, CONFIG
    )
    return resolved.priority, can_preempt


def forbidden(principal: Principal, **spec: Any) -> str:
    with pytest.raises(Forbidden) as caught:
        resolve(principal, **spec)
    assert caught.value.status_code == 403
    return caught.value.message


# --- raw priorities ---------------------------------------------------------------


def test_a_job_without_priority_gets_its_queues_default_and_may_not_preempt() -> None:
    assert resolve(ALICE) == (0, False)
    assert resolve(ALICE, queue="vision") == (5, False)
    assert resolve(ALICE, queue="nlp") == (3, False)
    assert resolve(ALICE, queue="undeclared") == (0, False)


def test_a_user_may_lower_the_priority_like_nice() -> None:
    assert resolve(ALICE, priority=0) == (0, False)
    assert resolve(ALICE, priority=-1_000_000) == (-1_000_000, False)
    assert resolve(ALICE, queue="nlp", priority=3) == (3, False)


def test_a_user_may_not_raise_the_priority_above_the_queues_default() -> None:
    assert forbidden(ALICE, priority=1_000_000) == (
        "priority 1000000 is above the limit of 0 in queue default: users may only lower "
        "their priority from the queue's default (0); ask an admin for a priority class"
    )
    assert "above the limit of 3 in queue nlp" in forbidden(ALICE, queue="nlp", priority=4)


def test_a_user_may_raise_it_up_to_the_queues_max_user_priority() -> None:
    assert resolve(ALICE, queue="vision", priority=20) == (20, False)
    assert forbidden(ALICE, queue="vision", priority=21) == (
        "priority 21 is above the limit of 20 in queue vision (its max_user_priority); "
        "ask an admin for a priority class"
    )


def test_an_admin_may_set_any_priority_but_a_number_never_preempts() -> None:
    assert resolve(ADMIN, priority=1_000_000) == (1_000_000, False)
    assert resolve(ADMIN, queue="vision", priority=-7) == (-7, False)


# --- classes ----------------------------------------------------------------------


def test_a_class_sets_the_priority_and_whether_the_job_may_preempt() -> None:
    assert resolve(ALICE, priority_class="batch") == (-10, False)
    assert resolve(BOB, priority_class="urgent") == (100, True)
    assert resolve(ALICE, queue="vision", priority_class="vision-rush") == (50, True)


def test_a_class_granted_to_other_users_is_forbidden_naming_class_and_grant() -> None:
    assert forbidden(ALICE, priority_class="urgent") == (
        "priority class 'urgent' is not granted to user alice (it is granted to: bob); ask an admin"
    )


def test_a_class_granted_in_other_queues_is_forbidden_there() -> None:
    assert forbidden(BOB, queue="nlp", priority_class="vision-rush") == (
        "priority class 'vision-rush' may not be used in queue nlp (only in: vision)"
    )


def test_an_admin_may_use_every_class_anywhere() -> None:
    assert resolve(ADMIN, priority_class="urgent") == (100, True)
    assert resolve(ADMIN, queue="nlp", priority_class="vision-rush") == (50, True)


def test_an_unknown_class_or_a_class_with_another_priority_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match=r"priority_class 'vip' is unknown \(batch, urgent"):
        resolve(ALICE, priority_class="vip")
    with pytest.raises(InvalidInput, match="give priority or priority_class, not both"):
        resolve(BOB, priority_class="urgent", priority=5)
    assert resolve(BOB, priority_class="urgent", priority=100) == (100, True)


def test_the_stored_spec_carries_the_resolved_priority() -> None:
    spec = JobSpec.model_validate({"image": "img", "queue": "vision"})
    resolved, _ = resolve_priority(spec, ALICE, CONFIG)
    assert resolved.model_dump()["priority"] == 5


# --- config -----------------------------------------------------------------------


def test_max_user_priority_below_the_default_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="max_user_priority 1 is below its default_priority 5"):
        SchedulerConfig.model_validate(
            {"queues": {"queues": [{"name": "q", "default_priority": 5, "max_user_priority": 1}]}}
        )
