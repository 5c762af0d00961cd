"""Nodes of a multi-node engine (Swarm) in the store: sync, loss, agents and fencing.

Every function takes the caller's session. A node's GPUs are the engine's
``NVIDIA-GPU`` generic resources: the engine says *which* GPUs a node has.
What they are (model, memory, topology, health) comes from the node's agent
once it has reported (``gpu_source`` ``agent``), else from the engine
labels ``gpudock.gpu.model``, ``gpudock.gpu.memory`` and ``gpudock.gpu.nvlink``
(``0,1;2,3``: NVLink domains of GPU indices, the generic resources' order).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpudock.core.cluster import REMOVED, EngineNode, NodeFacts
from gpudock.core.inventory import GpuHealth, GpuInfo, NodeInventory, NodeTraits
from gpudock.core.units import parse_size
from gpudock.store import inventory as inv_store
from gpudock.store.models import GpuRow, NodeRow

log = logging.getLogger("gpudock.store")

AGENT_SOURCE = "agent"
SWARM_SOURCE = "swarm"
UNKNOWN_MODEL = "NVIDIA GPU (model unknown: no agent, no gpudock.gpu.model label)"


@dataclass(frozen=True, slots=True)
class Synced:
    """What one engine node's sync changed: it is new, it came back (was away, now ready)."""

    name: str
    new: bool
    returned: bool


def facts(row: NodeRow) -> NodeFacts:
    return NodeFacts(
        name=row.name,
        engine_state=row.engine_state or "unknown",
        availability=row.availability or "active",
        down_since=row.down_since,
        agent_seen_at=row.agent_seen_at,
        fence_nonce=row.fence_nonce,
    )


def cluster_nodes(session: Session) -> list[NodeRow]:
    """The rows of engine nodes (``engine_id`` set), by name."""
    return list(
        session.scalars(
            select(NodeRow).where(NodeRow.engine_id.is_not(None)).order_by(NodeRow.name)
        )
    )


def away_nodes(session: Session) -> set[str]:
    """Engine nodes that are not ready now (down, unknown, removed...): their engine's
    view of their containers is stale, so nothing is judged from it."""
    stmt = select(NodeRow.name).where(
        NodeRow.engine_id.is_not(None), NodeRow.engine_state != "ready"
    )
    return set(session.scalars(stmt))


def sync_engine_node(
    session: Session,
    engine: EngineNode,
    applied: tuple[Mapping[str, str], Sequence[str]] | None,
    now: float,
) -> Synced:
    """Insert or refresh ``engine``'s row and GPUs; track when it stopped being ready.

    Labels are the engine node's labels with the applied config's for this
    node on top (``applied``: its labels and taints; taints only come from
    there); CPUs and memory are the engine's. ``down_since`` is set when the
    node stops being ready and cleared when it is ready again. A node whose agent
    has reported keeps the agent's GPU descriptions, driver and CUDA versions.
    """
    row = session.get(NodeRow, engine.name)
    new = row is None
    was_ready = row is not None and (row.engine_state in (None, "ready"))
    agent = row is not None and row.gpu_source == AGENT_SOURCE
    known = {} if row is None else {g.uuid: g for g in _gpus(session, engine.name)}
    inventory = engine_inventory(engine, known if agent else {})
    if agent:  # the agent's NVML facts stand until it reports again
        assert row is not None
        inventory = replace(
            inventory, driver_version=row.driver_version, cuda_version=row.cuda_version
        )
    labels, taints = applied if applied is not None else ({}, ())
    traits = NodeTraits(
        labels={**engine.labels, **labels},
        taints=tuple(taints),
        cpus=engine.cpus,
        memory=engine.memory,
    )
    inv_store.register_node(session, inventory, now, traits)
    row = session.get(NodeRow, engine.name)
    assert row is not None
    if agent:
        row.gpu_source = AGENT_SOURCE
    row.engine_id = engine.engine_id
    row.availability = engine.availability
    row.engine_state = engine.state
    if engine.ready:
        row.down_since = None
    elif row.down_since is None:
        row.down_since = now
    return Synced(engine.name, new, returned=not new and not was_ready and engine.ready)


def engine_inventory(engine: EngineNode, known: Mapping[str, GpuRow]) -> NodeInventory:
    """The node's GPUs: its generic resources, described by ``known`` rows (an agent's
    report) where there are some, else by the engine labels."""
    labels = engine.engine_labels
    model = labels.get("gpudock.gpu.model") or UNKNOWN_MODEL
    memory = _size(labels.get("gpudock.gpu.memory"), engine.name)
    nvlink = _domains(labels.get("gpudock.gpu.nvlink"), engine.name)
    gpus = []
    for index, uuid in enumerate(engine.gpus):
        row = known.get(uuid)
        if row is not None:
            gpus.append(
                GpuInfo(
                    index=row.index,
                    uuid=uuid,
                    name=row.name,
                    memory_total=row.memory_total,
                    mig_mode=row.mig_mode,
                    health=GpuHealth(row.health),
                    numa=row.numa,
                    nvlink=row.nvlink,
                )
            )
        else:
            gpus.append(
                GpuInfo(
                    index=index,
                    uuid=uuid,
                    name=model,
                    memory_total=memory,
                    nvlink=nvlink.get(index),
                )
            )
    source = AGENT_SOURCE if known else SWARM_SOURCE
    return NodeInventory(name=engine.name, gpus=tuple(gpus), source=source)


def apply_agent_inventory(session: Session, name: str, reported: NodeInventory, now: float) -> bool:
    """Describe the node's GPUs as its agent's NVML saw them; return whether anything changed.

    Only GPUs the engine lists for the node are described (the engine says
    which GPUs a node has); a listed GPU the agent does not see is marked
    ``missing`` (nothing new lands on it). Driver and CUDA versions are the agent's.
    """
    row = session.get(NodeRow, name)
    if row is None:
        return False
    rows = _gpus(session, name)
    seen = {g.uuid: g for g in reported.gpus}
    merged = []
    for gpu in rows:
        info = seen.get(gpu.uuid)
        if info is None:
            info = GpuInfo(
                index=gpu.index,
                uuid=gpu.uuid,
                name=gpu.name,
                memory_total=gpu.memory_total,
                health=GpuHealth.MISSING,
            )
        merged.append(info)
    before = [_gpu_key(g) for g in rows], row.driver_version, row.cuda_version, row.gpu_source
    inventory = NodeInventory(
        name=name,
        gpus=tuple(merged),
        driver_version=reported.driver_version,
        cuda_version=reported.cuda_version,
        source=AGENT_SOURCE,
    )
    after_rows = [_info_key(g) for g in merged]
    if before == (after_rows, reported.driver_version, reported.cuda_version, AGENT_SOURCE):
        return False
    inv_store.register_node(session, inventory, now, traits=None)
    return True


def _gpu_key(row: GpuRow) -> tuple[object, ...]:
    return (row.uuid, row.index, row.name, row.memory_total, row.health, row.numa, row.nvlink)


def _info_key(info: GpuInfo) -> tuple[object, ...]:
    return (
        info.uuid,
        info.index,
        info.name,
        info.memory_total,
        info.health.value,
        info.numa,
        info.nvlink,
    )


def mark_removed(session: Session, present: set[str], now: float) -> list[str]:
    """Engine nodes the engine no longer lists become ``removed``; return their names."""
    gone = []
    for row in cluster_nodes(session):
        if row.name in present or row.engine_state == REMOVED:
            continue
        row.engine_state = REMOVED
        row.down_since = row.down_since or now
        gone.append(row.name)
    return gone


def agent_seen(session: Session, name: str, now: float) -> None:
    session.execute(
        update(NodeRow)
        .where(NodeRow.name == name)
        .values(agent_seen_at=now)
        .execution_options(synchronize_session=False)
    )


def require_fence(session: Session, name: str, nonce: str, now: float) -> None:
    """The node came back: it stays closed until its agent echoes ``nonce`` (``confirm_fence``)."""
    session.execute(
        update(NodeRow)
        .where(NodeRow.name == name)
        .values(fence_nonce=nonce, fence_nonce_at=now)
        .execution_options(synchronize_session=False)
    )


def confirm_fence(session: Session, name: str, nonce: str | None, now: float) -> bool:
    """Clear the node's fence if ``nonce`` is the one it waits for; True when cleared."""
    if nonce is None:
        return False
    result = session.execute(
        update(NodeRow)
        .where(NodeRow.name == name, NodeRow.fence_nonce == nonce)
        .values(fence_nonce=None, fenced_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def _gpus(session: Session, node: str) -> list[GpuRow]:
    return list(session.scalars(select(GpuRow).where(GpuRow.node == node).order_by(GpuRow.index)))


def _size(text: str | None, node: str) -> int:
    if not text:
        return 0
    try:
        return parse_size(text)
    except ValueError:
        log.warning("node %s: engine label gpudock.gpu.memory=%r is not a size", node, text)
        return 0


def _domains(text: str | None, node: str) -> dict[int, int]:
    """``0,1;2,3`` → ``{0: 0, 1: 0, 2: 1, 3: 1}``; a malformed label is logged and ignored."""
    if not text:
        return {}
    try:
        groups = [[int(i) for i in group.split(",") if i.strip()] for group in text.split(";")]
    except ValueError:
        log.warning("node %s: engine label gpudock.gpu.nvlink=%r is not '0,1;2,3'", node, text)
        return {}
    return {index: number for number, group in enumerate(groups) for index in group}
