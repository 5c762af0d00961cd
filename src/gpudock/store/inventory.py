"""Nodes and GPUs: registration from discovery, status, and reads."""

from __future__ import annotations

import uuid

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpudock.core.events import EventType
from gpudock.core.inventory import Gpu, GpuHealth, Node, NodeInventory, NodeStatus, NodeTraits
from gpudock.core.job import JobState
from gpudock.store import events as event_store
from gpudock.store import meta as meta_store
from gpudock.store.models import GpuRow, JobRow, MetaRow, NodeRow


def register_node(
    session: Session, inv: NodeInventory, now: float, traits: NodeTraits | None = None
) -> None:
    """Insert or refresh a node and its GPUs from a discovery result.

    ``traits`` (labels, taints, CPU cores and host memory) replace the
    node's stored ones; None keeps them (a new node then has none). Each GPU's
    NUMA node and NVLink domain are refreshed from ``inv``. GPUs that
    discovery no longer reports are kept (their allocations must be released
    normally) but marked ``missing`` so nothing new lands on them. Allocation
    counters of known GPUs are never touched here. Bumps the cluster version
    (``meta.py``): what a submit checks a job against may have changed.
    """
    node = session.get(NodeRow, inv.name)
    if node is None:
        node = NodeRow(
            name=inv.name,
            status=NodeStatus.AVAILABLE.value,
            labels={},
            taints=[],
            cpus=None,
            memory=None,
            last_seen=now,
            gpu_source=inv.source,
        )
        session.add(node)
    if traits is not None:
        node.labels = dict(traits.labels)
        node.taints = list(traits.taints)
        node.cpus = traits.cpus
        node.memory = traits.memory
    node.driver_version = inv.driver_version
    node.cuda_version = inv.cuda_version
    node.gpu_source = inv.source
    node.last_seen = now
    session.flush()
    known = {g.uuid: g for g in session.scalars(select(GpuRow).where(GpuRow.node == inv.name))}
    seen = set()
    for info in inv.gpus:
        seen.add(info.uuid)
        row = known.get(info.uuid)
        if row is None:
            session.add(
                GpuRow(
                    uuid=info.uuid,
                    node=inv.name,
                    index=info.index,
                    name=info.name,
                    memory_total=info.memory_total,
                    mig_mode=info.mig_mode,
                    emulated=info.emulated,
                    health=info.health.value,
                    used_memory=0,
                    exclusive_job=None,
                    shared_jobs=0,
                    version=0,
                    numa=info.numa,
                    nvlink=info.nvlink,
                )
            )
            continue
        row.index = info.index
        row.name = info.name
        row.numa = info.numa
        row.nvlink = info.nvlink
        row.mig_mode = info.mig_mode
        row.emulated = info.emulated
        _set_gpu_health(session, row, info.health.value, now)
        if row.used_memory == 0:
            row.memory_total = info.memory_total
        row.version += 1
    for gone in set(known) - seen:
        row = known[gone]
        if _idle(row):
            session.delete(row)
        else:  # keep it until its job releases it, but place nothing new there
            _set_gpu_health(session, row, GpuHealth.MISSING.value, now)
            row.version += 1
    session.flush()
    meta_store.bump_cluster_version(session)  # what submits check changed (``meta.py``)


def _set_gpu_health(session: Session, row: GpuRow, health: str, now: float) -> None:
    """Set a GPU's health, recording a ``gpu.health`` event when it changes."""
    if row.health != health:
        payload = {"uuid": row.uuid, "index": row.index, "from": row.health, "to": health}
        event_store.append(session, EventType.GPU_HEALTH, now, payload, node=row.node)
    row.health = health


def set_node_status(
    session: Session, name: str, status: NodeStatus, reason: str | None, now: float
) -> bool:
    """Set availability; returns True if it changed."""
    row = session.get(NodeRow, name)
    if row is None:
        return False
    changed = row.status != status.value or row.status_reason != reason
    if row.status != status.value:
        _node_event(session, row, status.value, reason, now)
    row.status = status.value
    row.status_reason = reason
    row.last_seen = now
    return changed


def disown_other_nodes(session: Session, name: str, now: float) -> list[str]:
    """Mark every node but ``name`` unavailable: one server manages one host.

    A host renamed since the last start leaves its old node row behind; no
    new work may land there. Returns the names marked.
    """
    marked = []
    for row in session.scalars(select(NodeRow).where(NodeRow.name != name)):
        reason = f"not managed by this server (it runs on node {name}); no agent reports it"
        if row.status != NodeStatus.UNAVAILABLE.value:
            _node_event(session, row, NodeStatus.UNAVAILABLE.value, reason, now)
        if row.status != NodeStatus.UNAVAILABLE.value or row.status_reason != reason:
            row.status, row.status_reason, row.last_seen = NodeStatus.UNAVAILABLE.value, reason, now
            marked.append(row.name)
    return marked


def _node_event(
    session: Session, row: NodeRow, status: str, reason: str | None, now: float
) -> None:
    """Record a ``node.health`` event: the node's status moves from ``row.status``."""
    payload = {"from": row.status, "to": status, "reason": reason}
    event_store.append(session, EventType.NODE_HEALTH, now, payload, node=row.name)


def list_nodes(session: Session) -> list[Node]:
    """Every node with its GPUs and the CPU cores and memory its active jobs requested."""
    gpus = list_gpus(session)
    by_node: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        by_node.setdefault(gpu.node, []).append(gpu)
    cpus_used = used_cpus_by_node(session)
    memory_used = used_memory_by_node(session)
    return [
        Node(
            name=r.name,
            status=NodeStatus(r.status),
            status_reason=r.status_reason,
            driver_version=r.driver_version,
            cuda_version=r.cuda_version,
            gpu_source=r.gpu_source,
            last_seen=r.last_seen,
            labels=dict(r.labels or {}),
            gpus=by_node.get(r.name, []),
            taints=list(r.taints or []),
            cpus=r.cpus,
            cpus_used=cpus_used.get(r.name, 0.0),
            memory=r.memory,
            memory_used=memory_used.get(r.name, 0),
        )
        for r in session.scalars(select(NodeRow).order_by(NodeRow.name))
    ]


def used_cpus_by_node(session: Session) -> dict[str, float]:
    """``{node: sum of cpus}`` over jobs holding resources (ALLOCATED, STARTING,
    RUNNING) that requested CPUs. One aggregate query; nodes without such jobs
    are absent."""
    active = [s.value for s in JobState if s.holds_resources]
    stmt = (
        select(JobRow.node, func.sum(JobRow.cpus))
        .where(JobRow.state.in_(active), JobRow.cpus.is_not(None), JobRow.node.is_not(None))
        .group_by(JobRow.node)
    )
    return {node: float(total or 0.0) for node, total in session.execute(stmt) if node}


def used_memory_by_node(session: Session) -> dict[str, int]:
    """``{node: sum of memory}`` (bytes, from each job's spec) over jobs holding resources
    that set ``memory``. One aggregate query; nodes without such jobs are absent."""
    active = [s.value for s in JobState if s.holds_resources]
    memory = JobRow.spec["memory"].as_float()
    stmt = (
        select(JobRow.node, func.sum(memory))
        .where(JobRow.state.in_(active), memory.is_not(None), JobRow.node.is_not(None))
        .group_by(JobRow.node)
    )
    return {node: round(total or 0) for node, total in session.execute(stmt) if node}


def list_gpus(session: Session, node: str | None = None) -> list[Gpu]:
    stmt = select(GpuRow).order_by(GpuRow.node, GpuRow.index)
    if node is not None:
        stmt = stmt.where(GpuRow.node == node)
    return [
        Gpu(
            uuid=r.uuid,
            node=r.node,
            index=r.index,
            name=r.name,
            memory_total=r.memory_total,
            mig_mode=r.mig_mode,
            emulated=r.emulated,
            health=GpuHealth(r.health),
            used_memory=r.used_memory,
            exclusive_job=r.exclusive_job,
            shared_jobs=r.shared_jobs,
            version=r.version,
            numa=r.numa,
            nvlink=r.nvlink,
        )
        for r in session.scalars(stmt)
    ]


def _idle(row: GpuRow) -> bool:
    return row.exclusive_job is None and row.shared_jobs == 0


def instance_id(session: Session) -> str:
    """This installation's id, created on first use; labels its containers."""
    row = session.get(MetaRow, "instance_id")
    if row is None:
        row = MetaRow(key="instance_id", value=uuid.uuid4().hex[:12])
        session.add(row)
        session.flush()
    return row.value
