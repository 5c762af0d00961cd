"""Nodes of a multi-node engine (Swarm): when one takes jobs, when its jobs are lost.

Pure rules over a node's stored facts and the clock, used by the cluster
watcher (``runtime/cluster.py``) and shown by ``gpudock nodes``:

* a node takes new jobs only when it is in the swarm, ``ready``,
  ``active`` and not waiting for its agent to confirm fencing;
* a node that stops being ready gets ``node_grace`` from its last sign of
  life; after it, its jobs are lost, and requeued per their ``retries``
  *only if its agent was watching*
  (reporting until the node went away): that agent stops the node's
  containers by itself before the grace ends (``lease``), so a requeued
  attempt never runs beside the old one. An unwatched node's jobs wait for
  the operator (``gpudock job requeue ID --force``) or the node's return;
* a watched node that comes back stays closed until its agent reports, with
  the nonce issued at the return, that no container the server does not
  assign runs there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from gpudock.core.inventory import NodeStatus
from gpudock.core.units import format_duration

AVAILABILITIES = ("active", "pause", "drain")
REMOVED = "removed"  # engine_state of a node the engine no longer lists
WATCH_SLACK = 2.0  # seconds beyond three report intervals before an agent counts as silent


@dataclass(frozen=True, slots=True)
class EngineNode:
    """One node as a multi-node engine (Swarm) reports it.

    ``name`` is gpudock's name for it (``gpudock.node`` engine label, else
    the host name); ``state``: ``ready``, ``down``, ``unknown`` or
    ``disconnected``; ``availability``: ``active``, ``pause`` or ``drain``.
    ``gpus``: its ``NVIDIA-GPU`` generic resources (UUIDs), in the engine's
    order; ``engine_labels`` describe them (``gpudock.gpu.model``, ...).
    """

    engine_id: str
    name: str
    hostname: str
    state: str
    availability: str
    manager: bool
    labels: Mapping[str, str]
    engine_labels: Mapping[str, str]
    gpus: tuple[str, ...]
    cpus: float | None = None
    memory: int | None = None
    address: str | None = None

    @property
    def ready(self) -> bool:
        return self.state == "ready"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What the store knows of one engine node (``nodes`` row)."""

    name: str
    engine_state: str  # ready | down | unknown | disconnected | removed
    availability: str  # active | pause | drain
    down_since: float | None = None
    agent_seen_at: float | None = None
    fence_nonce: str | None = None

    @property
    def ready(self) -> bool:
        return self.engine_state == "ready"


def agent_live(facts: NodeFacts, now: float, interval: float) -> bool:
    """The node's agent reported within three intervals (plus ``WATCH_SLACK``)."""
    seen = facts.agent_seen_at
    return seen is not None and now - seen <= 3 * interval + WATCH_SLACK


def watched(facts: NodeFacts, interval: float, detection: float = 0.0) -> bool:
    """Was an agent reporting up to the moment the node stopped being ready?

    For a ready node: has an agent ever reported. A node that is away counts
    as watched when its agent's last report is at most three intervals, or
    the engine's ``detection`` delay (how long Swarm may take to mark a silent
    node down), plus ``WATCH_SLACK``, older than ``down_since``: that agent
    was alive when the node left, and fences by itself (``lease``).
    """
    if facts.agent_seen_at is None:
        return False
    if facts.down_since is None:
        return True
    window = max(3 * interval, detection) + WATCH_SLACK
    return facts.agent_seen_at >= facts.down_since - window


def lease(grace: float, interval: float) -> float:
    """How long an agent that can reach neither the server nor a manager waits before it
    stops its node's containers: the grace less two report intervals (at least one)."""
    return max(interval, grace - 2 * interval)


def loss_due(
    facts: NodeFacts, now: float, grace: float, interval: float, detection: float = 0.0
) -> bool:
    """The node is away and its grace is over.

    The grace runs from the node's last sign of life: Swarm's ``down`` mark,
    or, for a watched node, its agent's last report when that came first (a
    cut link silences the agent at once; Swarm notices only after its
    heartbeats). Safe because a watched node's agent fences by itself
    first: cut off, it stops the containers ``lease`` after its last
    answer; with its engine gone, ``lease`` after the engine went, which is
    before Swarm marks the node down. ``lease`` is two intervals less than
    the grace.
    """
    if facts.ready or facts.down_since is None:
        return False
    start = facts.down_since
    if facts.agent_seen_at is not None and watched(facts, interval, detection):
        start = min(start, facts.agent_seen_at)
    return now >= start + grace


def node_status(facts: NodeFacts, now: float, grace: float) -> tuple[NodeStatus, str | None]:
    """Whether the node takes new jobs, and why not (one line)."""
    if facts.engine_state == REMOVED:
        return NodeStatus.UNAVAILABLE, "not in the swarm any more (removed)"
    if not facts.ready:
        since = datetime.fromtimestamp(facts.down_since or now, tz=UTC)
        return NodeStatus.UNAVAILABLE, (
            f"{facts.engine_state} in the swarm since {since.isoformat(timespec='seconds')}; "
            f"its jobs are lost {format_duration(grace)} after that"
        )
    if facts.fence_nonce is not None:
        return NodeStatus.UNAVAILABLE, (
            "back in the swarm; waits for its agent to confirm that no stale container runs"
        )
    if facts.availability == "drain":
        return NodeStatus.UNAVAILABLE, "drained: no new jobs (running jobs go on)"
    if facts.availability == "pause":
        return NodeStatus.UNAVAILABLE, "cordoned: no new jobs (running jobs go on)"
    return NodeStatus.AVAILABLE, None
