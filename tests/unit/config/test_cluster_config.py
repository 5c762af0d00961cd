"""The live scheduling config: its validation (every error with its path), its diff, and
the store-free rules an apply checks (``services/admin.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpudock.cluster_config import ClusterConfig, diff
from gpudock.config import ServerConfig, format_validation_error
from gpudock.services.admin import guarantees_above_capacity, unknown_nodes, unknown_users

GiB = 2**30


def cluster(**fields: Any) -> ClusterConfig:
    return ClusterConfig.model_validate(fields)


def refusal(**fields: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        ClusterConfig.model_validate(fields)
    return format_validation_error(caught.value)


def test_every_structural_error_is_named_with_its_path() -> None:
    message = refusal(
        priority_classes=[{"name": "a", "value": 1}, {"name": "a", "value": 2}],
        nodes={"n1": {"taints": ["a:NoSchedule", "a=b:NoSchedule"], "labels": {"zone": "a"}}},
        color="blue",
    )
    assert message.startswith("priority_classes: priority class names must be unique; repeated: a")
    assert "nodes.n1.taints: taint key 'a' is given twice" in message
    assert message.endswith("color: unknown field")


def test_an_unknown_group_in_members_is_refused_naming_the_member() -> None:
    message = refusal(queues={"queues": [{"name": "q", "members": ["group:ghosts"]}]})
    assert "queues[0].members[0]: queue 'q' names unknown group 'ghosts'" in message


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"queues": {"fair_share": {"resource_weights": {"cpus": False}}}}, "weights.cpus"),
        ({"queues": {"fair_share": {"history_weight": "1"}}}, "fair_share.history_weight"),
        ({"queues": {"queues": [{"name": "q", "weight": True}]}}, "queues.queues.0.weight"),
        ({"queues": {"queues": [{"name": "q", "borrow": 1}]}}, "queues.queues.0.borrow"),
        ({"queues": {"queues": [{"name": "q", "limit": {"gpus": "4"}}]}}, "limit.gpus"),
        ({"queues": {"queues": [{"name": "q", "default_priority": 1.5}]}}, "default_priority"),
        ({"priority_classes": [{"name": "a", "value": True}]}, "priority_classes.0.value"),
    ],
)
def test_a_value_of_another_json_type_is_refused_not_coerced(
    fields: dict[str, Any], where: str
) -> None:
    """The schema says number, integer or boolean; ``false`` is not 0 and ``"4"`` is not 4."""
    assert where in refusal(**fields)


def test_integers_are_numbers() -> None:
    config = cluster(queues={"queues": [{"name": "q", "weight": 2, "limit": {"gpus": 4}}]})
    assert config.queues.queues[0].weight == 2.0


def test_sizes_and_durations_accept_units() -> None:
    config = cluster(
        queues={
            "queues": [{"name": "q", "guarantee": {"gpu_memory": "80GiB"}}],
            "fair_share": {"half_life": "1d"},
        }
    )
    assert config.queues.queues[0].guarantee.gpu_memory == 80 * GiB
    assert config.queues.fair_share.half_life == 86400


def test_the_diff_compares_named_entries_by_name() -> None:
    old = cluster(
        priority_classes=[{"name": "low", "value": -1}, {"name": "urgent", "value": 100}],
        queues={"queues": [{"name": "a", "limit": {"gpus": 4}}, {"name": "b"}]},
        nodes={"n1": {"labels": {"zone": "a"}}},
    )
    new = cluster(
        priority_classes=[{"name": "urgent", "value": 50}],
        queues={"queues": [{"name": "b"}, {"name": "a", "limit": {"gpus": 2}}]},
        nodes={"n1": {"labels": {"zone": "b"}}},
    )
    assert [(c.path, c.before, c.after) for c in diff(old, new)] == [
        ("nodes.n1.labels.zone", "a", "b"),
        (
            "priority_classes[low]",
            {"name": "low", "value": -1, "preempt": True, "description": ""},
            None,
        ),
        ("priority_classes[urgent].value", 100, 50),
        ("queues.queues[a].limit.gpus", 4.0, 2.0),
    ]
    assert diff(new, new) == []


def test_the_server_config_round_trips_through_its_scheduling_part() -> None:
    server = ServerConfig.model_validate(
        {
            "node": {"labels": {"zone": "a"}, "cpus": 8},
            "scheduler": {"priority_classes": [{"name": "p", "value": 1}]},
        }
    )
    part = ClusterConfig.of_server(server, "n1")
    assert part.nodes["n1"].labels == {"zone": "a"}
    changed = cluster(nodes={"n1": {"taints": ["gpu:NoSchedule"]}}).into(server, "n1")
    assert changed.node.taints == ["gpu:NoSchedule"] and changed.node.labels == {}
    assert changed.node.cpus == 8, "only labels and taints are live"
    assert changed.scheduler.priority_classes == []
    assert server.scheduler.priority_classes[0].name == "p", "the old value is untouched"


def test_members_and_group_users_must_be_known() -> None:
    config = cluster(
        queues={
            "groups": {"team": ["alice", "zed"]},
            "queues": [{"name": "q", "members": ["bob", "group:team", "alice"]}],
        }
    )
    assert unknown_users(config.queues, {"alice"}) == [
        ("queues.queues[0].members[0]", "unknown user 'bob'"),
        ("queues.groups.team[1]", "unknown user 'zed'"),
    ]


def test_nodes_must_be_registered() -> None:
    assert unknown_nodes(cluster(nodes={"n9": {}}), {"n1", "n2"}) == [
        ("nodes.n9", "unknown node 'n9' (registered: n1, n2)")
    ]


def test_a_cohorts_guarantees_may_not_exceed_the_clusters_gpus() -> None:
    config = cluster(
        queues={
            "cohorts": ["c"],
            "queues": [
                {"name": "a", "cohort": "c", "guarantee": {"gpus": 3, "gpu_memory": "100GiB"}},
                {"name": "b", "cohort": "c", "guarantee": {"gpus": 2}},
                {"name": "alone", "guarantee": {"gpus": 5}},
                {"name": "too-big", "guarantee": {"gpus": 6}},
            ],
        }
    )
    assert guarantees_above_capacity(config.queues, 5, 400 * GiB) == [
        (
            "queues.queues[3].guarantee.gpus",
            "the queue guarantees 6 gpus in total but the cluster has 5",
        ),
    ]
    assert guarantees_above_capacity(config.queues, 4, 80 * GiB) == [
        ("queues.cohorts[0]", "cohort 'c' guarantees 5 gpus in total but the cluster has 4"),
        (
            "queues.cohorts[0]",
            "cohort 'c' guarantees 100 gpu_memory in total but the cluster has 80",
        ),
        (
            "queues.queues[2].guarantee.gpus",
            "the queue guarantees 5 gpus in total but the cluster has 4",
        ),
        (
            "queues.queues[3].guarantee.gpus",
            "the queue guarantees 6 gpus in total but the cluster has 4",
        ),
    ]


def test_an_unknown_queueing_strategy_is_refused_listing_the_known_ones() -> None:
    assert refusal(queueing=["borrow-last", "lifo"]) == (
        "queueing: unknown queueing strategy 'lifo' (known: borrow-last, strict-fifo)"
    )
    assert refusal(queueing=["strict-fifo", "strict-fifo"]) == (
        "queueing: queueing strategies must be unique; repeated: strict-fifo"
    )


def test_the_queueing_strategies_are_live_and_round_trip() -> None:
    server = ServerConfig.model_validate({"scheduler": {"queueing": ["borrow-last"]}})
    assert ClusterConfig.of_server(server, "n1").queueing == ["borrow-last"]
    strict = cluster(queueing=["borrow-last", "strict-fifo"]).into(server, "n1")
    assert strict.scheduler.queueing == ["borrow-last", "strict-fifo"]
    assert server.scheduler.queueing == ["borrow-last"], "the old value is untouched"
    changes = diff(ClusterConfig.of_server(server, "n1"), ClusterConfig.of_server(strict, "n1"))
    assert [c.path for c in changes] == ["queueing"]
