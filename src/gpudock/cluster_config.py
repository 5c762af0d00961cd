"""The scheduling config an admin replaces live: ``gpudock admin apply -f cluster.yaml``.

Pure. ``ClusterConfig`` is the part of the server config that may change
without a restart: priority classes, queues (cohorts, groups, quotas,
members, per-user limits, fair share), the queueing strategies the cycle
walks the queues with, and each node's labels and taints::

    priority_classes:
      - {name: urgent, value: 100}
    queueing: [borrow-last, strict-fifo]
    queues:
      cohorts: [research]
      queues:
        - {name: vision, cohort: research, guarantee: {gpus: 2}, members: [alice]}
    nodes:
      gpu-07: {labels: {zone: a}, taints: ["reserved=training:NoSchedule"]}

An apply replaces all of it: a node the document does not name has no
labels and no taints. ``diff`` lists what an apply would change. What needs
the cluster to check (known users, nodes, capacity, jobs using a class) is
``services/admin.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpudock.config import (
    NodeConfig,
    PriorityClass,
    ServerConfig,
    checked_queueing,
    unique_classes,
)
from gpudock.core.spec_schema import AFFINITY_KEY, AFFINITY_VALUE, END, TAINT_PATTERN
from gpudock.queue.config import QueuesConfig
from gpudock.queue.strategies import DEFAULT as DEFAULT_QUEUEING


class NodeTraitsConfig(BaseModel):
    """A node's labels and taints (the rules of ``node:`` in the server config)."""

    model_config = ConfigDict(extra="forbid")

    labels: dict[str, str] = Field(
        default_factory=dict,
        description="matched by node_selector",
        json_schema_extra={
            "propertyNames": {"pattern": f"^{AFFINITY_KEY}{END}"},
            "additionalProperties": {"type": "string", "pattern": f"^{AFFINITY_VALUE}{END}"},
        },
    )
    taints: list[str] = Field(
        default_factory=list,
        description="'key=value:NoSchedule' (or 'key:NoSchedule'); one per key",
        json_schema_extra={"items": {"type": "string", "pattern": TAINT_PATTERN}},
    )

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        return NodeConfig._labels(value)

    @field_validator("taints")
    @classmethod
    def _taints(cls, value: list[str]) -> list[str]:
        return NodeConfig._taints(value)


class ClusterConfig(BaseModel):
    """The live scheduling config: priority classes, queues, node labels and taints."""

    model_config = ConfigDict(extra="forbid")

    priority_classes: list[PriorityClass] = Field(default_factory=list)
    queues: QueuesConfig = Field(default_factory=QueuesConfig)
    queueing: list[str] = Field(
        default_factory=lambda: list(DEFAULT_QUEUEING),
        description="queueing strategies, in order (borrow-last, strict-fifo)",
    )
    nodes: dict[str, NodeTraitsConfig] = Field(
        default_factory=dict, description="node name -> labels and taints; unnamed: none"
    )

    @field_validator("priority_classes")
    @classmethod
    def _unique(cls, value: list[PriorityClass]) -> list[PriorityClass]:
        return unique_classes(value)

    @field_validator("queueing")
    @classmethod
    def _strategies(cls, value: list[str]) -> list[str]:
        return checked_queueing(value)

    @classmethod
    def of_server(cls, config: ServerConfig, node: str) -> ClusterConfig:
        """The server config's scheduling part, with ``node``'s labels and taints."""
        traits = NodeTraitsConfig(labels=config.node.labels, taints=config.node.taints)
        return cls(
            priority_classes=config.scheduler.priority_classes,
            queues=config.scheduler.queues,
            queueing=config.scheduler.queueing,
            nodes={node: traits} if traits.labels or traits.taints else {},
        )

    def into(self, config: ServerConfig, node: str) -> ServerConfig:
        """``config`` with this scheduling part in force (a new value; ``config`` unchanged)."""
        scheduler = config.scheduler.model_copy(
            update={
                "priority_classes": self.priority_classes,
                "queues": self.queues,
                "queueing": self.queueing,
            }
        )
        traits = self.nodes.get(node, NodeTraitsConfig())
        node_config = config.node.model_copy(
            update={"labels": traits.labels, "taints": traits.taints}
        )
        return config.model_copy(update={"scheduler": scheduler, "node": node_config})

    def document(self) -> dict[str, Any]:
        """The JSON form (sizes in bytes, durations in seconds), as stored and served."""
        return self.model_dump(mode="json", exclude_none=True)


@dataclass(frozen=True, slots=True)
class Change:
    """One difference: ``path`` (``queues.queues[vision].limit.gpus``), before and after.

    ``before`` is None for an addition, ``after`` None for a removal.
    """

    path: str
    before: Any
    after: Any

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "before": self.before, "after": self.after}


def diff(old: ClusterConfig, new: ClusterConfig) -> list[Change]:
    """What replacing ``old`` with ``new`` changes, leaf by leaf, in path order.

    Lists of named entries (queues, priority classes) are compared by name;
    other lists whole.
    """
    changes: list[Change] = []
    _diff("", old.document(), new.document(), changes)
    return changes


def _keyed(value: Any) -> dict[str, Any] | None:
    """A list of ``{name: ...}`` mappings as ``{name: entry}``; None for other values."""
    if not isinstance(value, list) or not value:
        return None
    if not all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in value):
        return None
    return {v["name"]: v for v in value}


def _diff(path: str, old: Any, new: Any, out: list[Change]) -> None:
    if old == new:
        return
    old_keyed, new_keyed = _keyed(old), _keyed(new)
    if (old_keyed is not None or old == []) and (new_keyed is not None or new == []):
        old_keyed, new_keyed = old_keyed or {}, new_keyed or {}
        for name in sorted(old_keyed.keys() | new_keyed.keys()):
            _diff(f"{path}[{name}]", old_keyed.get(name), new_keyed.get(name), out)
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(old.keys() | new.keys()):
            _diff(f"{path}.{key}" if path else key, old.get(key), new.get(key), out)
        return
    out.append(Change(path, old, new))
