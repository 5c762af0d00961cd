"""Nodes and GPUs: registration from discovery, status, and reads."""

from __future__ import annotations

import uuid

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from gpudock.core.events import EventType
from gpudock.core.inventory import (
    DEFAULT_GPU_MEMORY_RESERVE,
    Gpu,
    GpuHealth,
    GpuInfo,
    MigDevice,
    Node,
    NodeInventory,
    NodeStatus,
    NodeTraits,
)
from gpudock.core.job import JobState
from gpudock.core.mig import known_profiles
from gpudock.store import events as event_store
from gpudock.store import meta as meta_store
from gpudock.store.models import GpuRow, JobRow, MetaRow, MigDeviceRow, NodeRow


def register_node(
    session: Session, inv: NodeInventory, now: float, traits: NodeTraits | None = None
) -> None:
    """Insert or refresh a node and its GPUs from a discovery result.

    ``traits`` (labels, taints, CPU cores, host memory, the GPU memory reserve
    and the sharing mode) replace the node's stored ones; None keeps them (a
    new node then has none, and its GPUs the default reserve). Each GPU's
    NUMA node, NVLink domain, brand and compute capability are refreshed from
    ``inv``; its ``memory_reserved`` is the reserve, at most its memory. GPUs
    that discovery no longer reports are kept (their allocations must be
    released normally) but marked ``missing`` so nothing new lands on them. A
    quarantined or cordoned GPU stays so (``GpuHealth.sticky``). Allocation
    counters of known GPUs are never touched here. The node's MIG devices are
    replaced by ``inv.mig_devices`` (``_register_mig_devices``). Bumps the
    cluster version (``meta.py``): what a submit checks a job against may have
    changed.
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
        if traits.gpu_sharing is not None:
            node.gpu_sharing = traits.gpu_sharing.value
    node.driver_version = inv.driver_version
    node.cuda_version = inv.cuda_version
    node.gpu_source = inv.source
    node.last_seen = now
    session.flush()
    known = {g.uuid: g for g in session.scalars(select(GpuRow).where(GpuRow.node == inv.name))}
    reserve = traits.gpu_memory_reserve if traits is not None else None
    seen = set()
    for info in inv.gpus:
        seen.add(info.uuid)
        row = known.get(info.uuid)
        if row is None:
            row = GpuRow(
                uuid=info.uuid,
                node=inv.name,
                health=info.health.value,
                used_memory=0,
                exclusive_job=None,
                shared_jobs=0,
                version=0,
                memory_reserved=0,
            )
            session.add(row)
            reserve = DEFAULT_GPU_MEMORY_RESERVE if reserve is None else reserve
        _refresh_gpu(session, row, info, reserve, now)
    for gone in set(known) - seen:
        row = known[gone]
        if _idle(row):
            session.execute(delete(MigDeviceRow).where(MigDeviceRow.parent_uuid == row.uuid))
            session.delete(row)
        else:  # keep it until its job releases it, but place nothing new there
            _set_gpu_health(
                session, row, GpuHealth.MISSING.value, now, "discovery no longer sees it"
            )
            row.version += 1
    session.flush()
    _register_mig_devices(session, inv)
    meta_store.bump_cluster_version(session)  # what submits check changed (``meta.py``)


def _refresh_gpu(
    session: Session, row: GpuRow, info: GpuInfo, reserve: int | None, now: float
) -> None:
    """Copy what discovery reports into ``row``; memory only while nothing is allocated."""
    row.index = info.index
    row.name = info.name
    row.numa = info.numa
    row.nvlink = info.nvlink
    row.mig_mode = info.mig_mode
    row.emulated = info.emulated
    row.brand = info.brand
    row.arch = info.arch
    if not GpuHealth(row.health).sticky:
        why = (
            "NVML queries of it failed at discovery" if info.health is GpuHealth.UNHEALTHY else None
        )
        _set_gpu_health(session, row, info.health.value, now, why)
    if row.used_memory == 0:
        row.memory_total = info.memory_total
    if reserve is not None:
        row.memory_reserved = min(reserve, row.memory_total)
    row.version = (row.version or 0) + 1


def _register_mig_devices(session: Session, inv: NodeInventory) -> None:
    """Make the node's ``mig_devices`` rows those of ``inv``; a gone one that a job
    holds is kept, marked ``missing``, until the job releases it."""
    known = {
        m.uuid: m
        for m in session.scalars(select(MigDeviceRow).where(MigDeviceRow.node == inv.name))
    }
    parents = {g.uuid for g in inv.gpus}
    for info in inv.mig_devices:
        if info.parent_uuid not in parents:
            continue
        row = known.pop(info.uuid, None)
        if row is None:
            row = MigDeviceRow(uuid=info.uuid, node=inv.name, job_id=None, version=0)
            session.add(row)
        row.parent_uuid = info.parent_uuid
        row.slot = info.slot
        row.profile = info.profile
        row.memory_total = info.memory_total
        row.gpu_instance = info.gpu_instance
        row.compute_instance = info.compute_instance
        row.health = GpuHealth.OK.value
        row.version = (row.version or 0) + 1
    for row in known.values():
        if row.job_id is None:
            session.delete(row)
        else:
            row.health = GpuHealth.MISSING.value
    session.flush()


def _set_gpu_health(
    session: Session, row: GpuRow, health: str, now: float, reason: str | None = None
) -> None:
    """Set a GPU's health and its reason, recording a ``gpu.health`` event when it changes."""
    if row.health != health:
        payload = {
            "uuid": row.uuid,
            "index": row.index,
            "from": row.health,
            "to": health,
            "reason": reason,
        }
        event_store.append(session, EventType.GPU_HEALTH, now, payload, node=row.node)
    row.health = health
    row.health_reason = None if health == GpuHealth.OK.value else reason


def set_gpu_health(
    session: Session, uuid: str, health: GpuHealth, reason: str | None, now: float
) -> Gpu | None:
    """Quarantine, cordon or bring back (``ok``) GPU ``uuid``; None if there is none.

    The change is conditional on nothing else: the caller decides whether it
    may be made (``services.gpu_health``). Bumps the row version, so the
    applier's next conditional update sees it; records a ``gpu.health`` event.
    """
    row = session.get(GpuRow, uuid)
    if row is None:
        return None
    if row.health != health.value or row.health_reason != reason:
        _set_gpu_health(session, row, health.value, now, reason)
        row.version += 1
    session.flush()
    return _gpu_of(row)


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
    cpus_used, memory_used = used_by_node(session)
    migs: dict[str, list[MigDevice]] = {}
    for mig in list_mig_devices(session):
        migs.setdefault(mig.node, []).append(mig)
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
            engine_state=r.engine_state,
            availability=r.availability,
            down_since=r.down_since,
            agent_seen_at=r.agent_seen_at,
            fencing=r.fence_nonce is not None,
            gpu_sharing=r.gpu_sharing,
            mig_devices=migs.get(r.name, []),
        )
        for r in session.scalars(select(NodeRow).order_by(NodeRow.name))
    ]


def used_cpus_by_node(session: Session) -> dict[str, float]:
    """``{node: sum of cpus}`` over jobs holding resources (ALLOCATED, STARTING,
    RUNNING) that requested CPUs; a gang's ``cpus`` count on each of its nodes."""
    return used_by_node(session)[0]


def used_memory_by_node(session: Session) -> dict[str, int]:
    """``{node: sum of memory}`` (bytes, from each job's spec) over jobs holding resources
    that set ``memory``; a gang's ``memory`` counts on each of its nodes."""
    return used_by_node(session)[1]


def used_by_node(session: Session) -> tuple[dict[str, float], dict[str, int]]:
    """The CPU cores and memory bytes held per node by jobs holding resources: one
    aggregate query over one-node jobs and one over gangs (whose ``cpus`` and ``memory``
    count on each of their nodes). A node without such jobs is absent."""
    active = [s.value for s in JobState if s.holds_resources]
    memory = JobRow.spec["memory"].as_float()
    stmt = (
        select(JobRow.node, func.sum(JobRow.cpus), func.sum(memory))
        .where(JobRow.state.in_(active), JobRow.node.is_not(None), JobRow.gang.is_(None))
        .group_by(JobRow.node)
    )
    cpus: dict[str, float] = {}
    mem: dict[str, int] = {}
    for node, cpu_total, mem_total in session.execute(stmt):
        if node and cpu_total is not None:
            cpus[node] = float(cpu_total)
        if node and mem_total is not None:
            mem[node] = round(mem_total)
    gangs = select(JobRow.cpus, memory, JobRow.gang).where(JobRow.state.in_(active), _GANG)
    for cpu, size, gang in session.execute(gangs):
        for node, _uuids in gang or ():
            if cpu is not None:
                cpus[str(node)] = cpus.get(str(node), 0.0) + float(cpu)
            if size is not None:
                mem[str(node)] = mem.get(str(node), 0) + round(size)
    return cpus, mem


_GANG = JobRow.gang.is_not(None)


def list_gpus(session: Session, node: str | None = None) -> list[Gpu]:
    stmt = select(GpuRow).order_by(GpuRow.node, GpuRow.index)
    if node is not None:
        stmt = stmt.where(GpuRow.node == node)
    return [_gpu_of(r) for r in session.scalars(stmt)]


def _gpu_of(r: GpuRow) -> Gpu:
    return Gpu(
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
        memory_reserved=r.memory_reserved or 0,
        health_reason=r.health_reason,
        brand=r.brand,
        arch=r.arch,
    )


def known_mig_profiles(session: Session) -> set[str]:
    """Every MIG profile a job may ask for here: those discovery found, and those the
    MIG table of some node's GPU model offers (``core.mig.known_profiles``)."""
    names = session.scalars(select(GpuRow.name).distinct())
    found = session.scalars(select(MigDeviceRow.profile).distinct())
    return known_profiles(names, found)


def list_mig_devices(session: Session, node: str | None = None) -> list[MigDevice]:
    """The MIG devices discovery found, by node, parent GPU and slot."""
    stmt = select(MigDeviceRow).order_by(
        MigDeviceRow.node, MigDeviceRow.parent_uuid, MigDeviceRow.slot
    )
    if node is not None:
        stmt = stmt.where(MigDeviceRow.node == node)
    return [
        MigDevice(
            uuid=r.uuid,
            node=r.node,
            parent_uuid=r.parent_uuid,
            slot=r.slot,
            profile=r.profile,
            memory_total=r.memory_total,
            gpu_instance=r.gpu_instance,
            compute_instance=r.compute_instance,
            job=r.job_id,
        )
        for r in session.scalars(stmt)
    ]


def set_node_sharing(session: Session, name: str, sharing: str) -> bool:
    """Record how node ``name`` shares its GPUs (``GpuSharing`` value); True if it changed."""
    row = session.get(NodeRow, name)
    if row is None or row.gpu_sharing == sharing:
        return False
    row.gpu_sharing = sharing
    return True


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
