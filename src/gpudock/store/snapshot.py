"""Build the scheduler's immutable ``Snapshot`` from the store in one read.

A fixed number of queries, never one per row: nodes, GPUs, the CPU cores
and memory held per node (an aggregate each), pending jobs, running jobs and
allocations.
Taints and tolerations are stored canonically and parsed here (memoised).

``SnapshotCache`` makes consecutive snapshots incremental: a node or a
running job equal to the previous snapshot's comes back as that very
object, so the scheduler reuses what it derived from it last cycle
(``scheduler/capacity.py``, ``catalog.py``, ``running.py``: caches checked
by identity).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import lru_cache
from operator import is_
from typing import Any, TypeVar

from sqlalchemy import Text, cast, select
from sqlalchemy.orm import Session

from gpudock.core.affinity import Taint, Toleration, parse_taint, parse_toleration
from gpudock.core.inventory import GpuHealth, NodeStatus
from gpudock.core.job import JobState
from gpudock.scheduler.snapshot import (
    GpuView,
    JobRequest,
    MigView,
    NodeView,
    RunningJob,
    Snapshot,
)
from gpudock.store.inventory import used_by_node
from gpudock.store.jobs import ACTIVE_STATES, after_in_order, gang_parts
from gpudock.store.models import AllocationRow, GpuRow, JobRow, MigDeviceRow, NodeRow

T = TypeVar("T", NodeView, RunningJob)

_taint = lru_cache(maxsize=4096)(parse_taint)
_toleration = lru_cache(maxsize=4096)(parse_toleration)


def load_snapshot(
    session: Session, now: float, limit: int | None = None, gpu_share: int = 0
) -> Snapshot:
    """Nodes with their GPUs' allocation state, pending jobs, running jobs.

    The pending jobs are the first ``limit`` (all when None) in the
    scheduler's order and, when more wait, the first ``gpu_share`` of those
    further back that ask for GPUs and are not held (``_pending``): a backlog
    of CPU-only jobs never hides a GPU job from a cycle while GPUs are idle.
    """
    return Snapshot(
        now=now,
        nodes=load_nodes(session),
        pending=_pending(session, limit, gpu_share),
        running=_running(session),
    )


def load_nodes(session: Session) -> tuple[NodeView, ...]:
    """Every node with its GPUs (topology included) and what is allocated on them.

    ``used_cpus`` sums the ``cpus`` of the jobs holding resources on the node,
    ``used_host_memory`` their ``memory``; ``cpus`` and ``host_memory`` are the
    node's stored capacity (None: not counted). A GPU's ``memory_total`` here
    is what shares may take: its memory less its ``memory_reserved`` (an
    exclusive job uses all of that), as the applier's WHERE clause counts it.
    A GPU in MIG mode is not ``healthy`` here: its MIG devices are the units
    jobs get, never the GPU whole or a share of it (the applier agrees). A MIG
    device is ``healthy`` when it and its parent GPU are (not quarantined, not
    cordoned), and ``held`` while a job holds it. ``out_of_service`` names the
    GPUs not ``ok`` (MIG mode aside) with their health and its reason.
    """
    gpus: dict[str, list[GpuView]] = {}
    parents_ok: set[str] = set()
    out: dict[str, list[tuple[int, str]]] = {}
    for g in session.scalars(select(GpuRow).order_by(GpuRow.node, GpuRow.index)):
        if g.health == GpuHealth.OK.value:
            parents_ok.add(g.uuid)
        elif not g.mig_mode:
            why = g.health + (f": {g.health_reason}" if g.health_reason else "")
            out.setdefault(g.node, []).append((g.index, why))
        capacity = g.memory_total - (g.memory_reserved or 0)
        gpus.setdefault(g.node, []).append(
            GpuView(
                uuid=g.uuid,
                index=g.index,
                name=g.name,
                memory_total=capacity,
                used_memory=min(g.used_memory, capacity),
                exclusive=g.exclusive_job is not None,
                shared_jobs=g.shared_jobs,
                healthy=g.health == GpuHealth.OK.value and not g.mig_mode,
                numa=g.numa,
                nvlink=g.nvlink,
            )
        )
    cpus_used, memory_used = used_by_node(session)
    migs = _mig_views(session, parents_ok)
    return tuple(
        NodeView(
            name=n.name,
            gpus=tuple(gpus.get(n.name, ())),
            available=n.status == NodeStatus.AVAILABLE.value,
            unavailable_reason=n.status_reason if n.status != NodeStatus.AVAILABLE.value else None,
            labels=tuple(sorted((n.labels or {}).items())),
            taints=_taints(n.taints),
            cpus=n.cpus,
            used_cpus=cpus_used.get(n.name, 0.0),
            host_memory=n.memory,
            used_host_memory=memory_used.get(n.name, 0) if n.memory is not None else 0,
            migs=tuple(migs.get(n.name, ())),
            gpu_sharing=n.gpu_sharing,
            cuda_version=n.cuda_version,
            driver_version=n.driver_version,
            out_of_service=tuple(out.get(n.name, ())),
        )
        for n in session.scalars(select(NodeRow).order_by(NodeRow.name))
    )


def _mig_views(session: Session, parents_ok: set[str]) -> dict[str, list[MigView]]:
    """Each node's MIG devices, by parent GPU and slot (``load_nodes``)."""
    stmt = select(MigDeviceRow).order_by(
        MigDeviceRow.node, MigDeviceRow.parent_uuid, MigDeviceRow.slot
    )
    migs: dict[str, list[MigView]] = {}
    for m in session.scalars(stmt):
        migs.setdefault(m.node, []).append(
            MigView(
                uuid=m.uuid,
                parent=m.parent_uuid,
                profile=m.profile,
                memory_total=m.memory_total,
                held=m.job_id is not None,
                healthy=m.health == GpuHealth.OK.value and m.parent_uuid in parents_ok,
            )
        )
    return migs


def _taints(stored: list[str] | None) -> tuple[Taint, ...]:
    return tuple(_taint(text) for text in stored or ())


def _tolerations(stored: list[str] | None) -> tuple[Toleration, ...]:
    return tuple(_toleration(text) for text in stored or ())


_PENDING_COLUMNS = (
    JobRow.id,
    JobRow.gpus,
    JobRow.submitted_at,
    JobRow.gpu_memory,
    JobRow.gpu_model,
    JobRow.priority,
    JobRow.queue,
    JobRow.user,
    JobRow.nodes,
    JobRow.cpus,
    JobRow.max_runtime,
    JobRow.can_preempt,
    cast(JobRow.node_selector, Text),
    cast(JobRow.tolerations, Text),
    JobRow.topology,
    JobRow.spec["memory"].as_float(),
    JobRow.held_by,
    JobRow.spec["max_gpus"].as_float(),
    JobRow.spec["mig"].as_string(),
    JobRow.spec["gpu_compute"].as_float(),
    JobRow.cuda_require,
)
_IN_ORDER = (JobRow.priority.desc(), JobRow.submitted_at, JobRow.id)


def _pending(session: Session, limit: int | None, gpu_share: int = 0) -> tuple[JobRequest, ...]:
    """The PENDING jobs in the scheduler's order (priority, submit time, id): the
    first ``limit`` and, when that many were found, up to ``gpu_share`` more from
    further back that ask for GPUs and are not held, in the same order (so the
    whole tuple stays in that order, and its first ``limit`` are the prefix).

    Runs every cycle over the whole backlog, so each row is unpacked by
    position, and the selector and tolerations arrive as their stored JSON
    text, decoded once per distinct text (almost every job has ``{}`` and ``[]``).
    """
    pending = JobRow.state == JobState.PENDING.value
    stmt = select(*_PENDING_COLUMNS).where(pending).order_by(*_IN_ORDER)
    if limit is not None:
        stmt = stmt.limit(limit)
    jobs = _requests(session.execute(stmt))
    if limit is None or len(jobs) < limit or gpu_share <= 0 or not jobs:
        return jobs
    beyond = (
        select(*_PENDING_COLUMNS)
        .where(pending, JobRow.gpus > 0, JobRow.held_by.is_(None), after_in_order(jobs[-1]))
        .order_by(*_IN_ORDER)
        .limit(gpu_share)
    )
    return jobs + _requests(session.execute(beyond))


def _requests(rows: Iterable[Sequence[Any]]) -> tuple[JobRequest, ...]:
    """``JobRequest``s from rows of ``_PENDING_COLUMNS``; a MIG job asks for no GPU (its
    unit is its MIG device: ``JobRequest.mig``)."""
    return tuple(
        JobRequest(
            id=job_id,
            gpus=0 if mig is not None else gpus,
            submitted_at=submitted_at,
            gpu_memory=gpu_memory,
            gpu_model=gpu_model,
            priority=priority,
            queue=queue,
            user=user,
            nodes=nodes,
            cpus=cpus,
            max_runtime=max_runtime,
            can_preempt=can_preempt,
            node_selector=_selector_text(selector),
            tolerations=_tolerations_text(tolerations),
            topology=topology,
            memory=None if memory is None else round(memory),
            held_by=held_by,
            max_gpus=None if max_gpus is None else round(max_gpus),
            mig=mig,
            gpu_compute=None if gpu_compute is None else round(gpu_compute),
            cuda_require=cuda_require,
        )
        for (
            job_id,
            gpus,
            submitted_at,
            gpu_memory,
            gpu_model,
            priority,
            queue,
            user,
            nodes,
            cpus,
            max_runtime,
            can_preempt,
            selector,
            tolerations,
            topology,
            memory,
            held_by,
            max_gpus,
            mig,
            gpu_compute,
            cuda_require,
        ) in rows
    )


@lru_cache(maxsize=4096)
def _selector_text(text: str | None) -> tuple[tuple[str, str], ...]:
    """A stored ``node_selector`` (JSON text) as the request's sorted pairs."""
    return tuple(sorted((json.loads(text) or {}).items())) if text else ()


@lru_cache(maxsize=4096)
def _tolerations_text(text: str | None) -> tuple[Toleration, ...]:
    """Stored ``tolerations`` (JSON text of canonical strings), parsed."""
    return _tolerations(json.loads(text)) if text else ()


def _running(session: Session) -> tuple[RunningJob, ...]:
    """Jobs holding GPUs, with the share they hold per GPU (from their allocations); a
    MIG job holds its MIG device (``RunningJob.mig``) and no GPU.

    A multi-node gang is one entry per node (its parts, rank order), as the
    simulator gives it: each holds that node's GPUs, and all share the job's id.
    """
    shares: dict[int, int | None] = {}
    for job_id, memory in session.execute(select(AllocationRow.job_id, AllocationRow.memory)):
        shares[job_id] = memory
    stmt = (
        select(
            JobRow.id,
            JobRow.queue,
            JobRow.priority,
            JobRow.gpus,
            JobRow.node,
            JobRow.gpu_uuids,
            JobRow.started_at,
            JobRow.submitted_at,
            JobRow.max_runtime,
            JobRow.min_runtime,
            JobRow.restart_cost,
            JobRow.checkpoint_interval,
            JobRow.allocated_at,
            JobRow.preemptible,
            JobRow.stop_requested,
            JobRow.preempted_for,
            JobRow.user,
            JobRow.cpus,
            JobRow.spec["max_gpus"].as_float().label("max_gpus"),
            JobRow.spec["elastic"].as_string().label("elastic"),
            JobRow.spec["memory"].as_float().label("memory"),
            JobRow.spec["mig"].as_string().label("mig"),
            JobRow.gang,
        )
        .where(JobRow.state.in_([s.value for s in ACTIVE_STATES]))
        .order_by(JobRow.id)
    )
    return tuple(
        RunningJob(
            id=r.id,
            queue=r.queue,
            priority=r.priority,
            node=node,
            gpu_uuids=uuids if r.mig is None else (),
            memory_per_gpu=shares.get(r.id),
            started_at=r.started_at,
            submitted_at=r.submitted_at,
            max_runtime=r.max_runtime,
            min_runtime=r.min_runtime,
            preemptible=r.preemptible,
            stopping=r.stop_requested is not None,
            preempted_for=r.preempted_for,
            user=r.user,
            cpus=r.cpus,
            elastic=_restartable(r.gpus, r.max_gpus, r.elastic),
            memory=None if r.memory is None else round(r.memory),
            restart_cost=r.restart_cost,
            checkpoint_interval=r.checkpoint_interval,
            start_seconds=_start_seconds(r.allocated_at, r.started_at),
            mig=next(iter(r.gpu_uuids or ()), None) if r.mig is not None else None,
        )
        for r in session.execute(stmt)
        for node, uuids in _parts(r.node, r.gpu_uuids, r.gang)
    )


def _start_seconds(allocated_at: float | None, started_at: float | None) -> float | None:
    """``RunningJob.start_seconds``: how long its current run took from allocation to
    running (its container's start), the measured part of what a restart costs it."""
    if allocated_at is None or started_at is None:
        return None
    return max(0.0, started_at - allocated_at)


def _parts(
    node: str | None, uuids: list[str] | None, gang: list[list[object]] | None
) -> list[tuple[str, tuple[str, ...]]]:
    """``(node, GPU uuids)`` of each part of a job holding resources: one, or a gang's."""
    if gang:
        return [(part.node, part.gpu_uuids) for part in gang_parts(gang)]
    return [(node or "", tuple(uuids or ()))]


def _restartable(gpus: int, max_gpus: float | None, elastic: str | None) -> tuple[int, int] | None:
    """``RunningJob.elastic``: the GPU range of an ``elastic: restart`` job, else None."""
    if elastic != "restart" or max_gpus is None or round(max_gpus) <= gpus:
        return None
    return (gpus, round(max_gpus))


class SnapshotCache:
    """Loads snapshots whose unchanged parts are the previous snapshot's objects.

    ``intern`` swaps each node view equal to the last one of its name, and
    each running job equal to the last one of its id, for that object; the
    running tuple itself when every job is. Equal frozen objects answer
    every question alike, so a Plan never depends on it; it only lets the
    scheduler's identity-checked caches hit. It keeps the latest snapshot's
    objects only; concurrent callers take turns.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeView] = {}
        self._jobs: dict[int, RunningJob] = {}
        self._running: tuple[RunningJob, ...] = ()

    def load(
        self, session: Session, now: float, limit: int | None = None, gpu_share: int = 0
    ) -> Snapshot:
        """``load_snapshot``, interned."""
        return self.intern(load_snapshot(session, now, limit, gpu_share))

    def intern(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with the previous snapshot's objects wherever they are equal."""
        with self._lock:
            old_nodes, old_jobs = self._nodes, self._jobs
            nodes = tuple(_same(old_nodes.get(view.name), view) for view in snapshot.nodes)
            running = tuple(_same(old_jobs.get(job.id), job) for job in snapshot.running)
            if len(running) == len(self._running) and all(map(is_, running, self._running)):
                running = self._running
            self._nodes = {view.name: view for view in nodes}
            self._jobs = {job.id: job for job in running}
            self._running = running
        return replace(snapshot, nodes=nodes, running=running)


def _same(old: T | None, new: T) -> T:
    """``old`` when it equals ``new``, else ``new``."""
    return old if old is not None and old == new else new
