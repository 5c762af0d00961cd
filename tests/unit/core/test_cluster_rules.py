"""When a Swarm node takes jobs, when its jobs are lost, when its agent counts as watching."""

from __future__ import annotations

import pytest

from gpudock.core.cluster import NodeFacts, agent_live, lease, loss_due, node_status, watched
from gpudock.core.inventory import NodeStatus

GRACE, INTERVAL = 60.0, 5.0


def facts(**fields: object) -> NodeFacts:
    base: dict[str, object] = {"name": "n", "engine_state": "ready", "availability": "active"}
    base.update(fields)
    return NodeFacts(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fields", "status", "why"),
    [
        ({}, NodeStatus.AVAILABLE, None),
        ({"availability": "drain"}, NodeStatus.UNAVAILABLE, "drained"),
        ({"availability": "pause"}, NodeStatus.UNAVAILABLE, "cordoned"),
        (
            {"engine_state": "down", "down_since": 100.0},
            NodeStatus.UNAVAILABLE,
            "down in the swarm",
        ),
        ({"fence_nonce": "x"}, NodeStatus.UNAVAILABLE, "confirm that no stale container"),
        ({"engine_state": "removed", "down_since": 1.0}, NodeStatus.UNAVAILABLE, "removed"),
    ],
)
def test_a_node_takes_jobs_only_ready_active_and_fenced(
    fields: dict[str, object], status: NodeStatus, why: str | None
) -> None:
    got, reason = node_status(facts(**fields), 200.0, GRACE)
    assert got is status
    assert (reason is None) if why is None else (why in (reason or ""))


def test_a_node_is_lost_a_grace_after_its_last_sign_of_life() -> None:
    cut = facts(engine_state="down", down_since=1000.0, agent_seen_at=985.0)  # agent first
    assert watched(cut, INTERVAL)
    assert not loss_due(cut, 985.0 + GRACE - 0.1, GRACE, INTERVAL)
    assert loss_due(cut, 985.0 + GRACE, GRACE, INTERVAL)
    dead_engine = facts(engine_state="down", down_since=1000.0, agent_seen_at=1030.0)
    assert not loss_due(dead_engine, 1000.0 + GRACE - 0.1, GRACE, INTERVAL)  # Swarm first
    assert loss_due(dead_engine, 1000.0 + GRACE, GRACE, INTERVAL)
    assert not loss_due(facts(down_since=None), 10**9, GRACE, INTERVAL)
    assert not loss_due(facts(down_since=5.0), 10**9, GRACE, INTERVAL)  # ready again


def test_an_agent_silent_long_before_the_loss_does_not_watch() -> None:
    silent = facts(engine_state="down", down_since=1000.0, agent_seen_at=1000.0 - 3 * INTERVAL - 3)
    assert not watched(silent, INTERVAL)
    assert loss_due(silent, 1000.0 + GRACE, GRACE, INTERVAL)  # due: its jobs wait, noted
    assert not watched(facts(), INTERVAL)  # never had an agent
    assert watched(facts(agent_seen_at=1.0), INTERVAL)  # a ready node that has had one


def test_agents_are_live_for_three_intervals_and_fence_before_the_grace_ends() -> None:
    assert agent_live(facts(agent_seen_at=100.0), 100.0 + 3 * INTERVAL, INTERVAL)
    assert not agent_live(facts(agent_seen_at=100.0), 100.0 + 3 * INTERVAL + 3, INTERVAL)
    assert lease(GRACE, INTERVAL) == GRACE - 2 * INTERVAL
    assert lease(3.0, 0.5) == 2.0 and lease(1.0, 5.0) == 5.0  # never below one interval


def test_swarms_own_detection_delay_keeps_a_cut_node_watched() -> None:
    """A cut link silences the agent at once; Swarm marks the node down only after its
    heartbeats (5 of them here): that agent was watching all the same."""
    cut = facts(engine_state="down", down_since=1012.0, agent_seen_at=1000.0)
    assert not watched(cut, 0.5)
    assert watched(cut, 0.5, detection=25.0)
    assert loss_due(cut, 1000.0 + 3.0, 3.0, 0.5, detection=25.0)  # a grace after its silence
