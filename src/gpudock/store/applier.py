"""The applier: commit a scheduler Plan with conditional updates.

The scheduler decided on a snapshot that may already be stale. For each
placement the applier re-checks the *current* rows inside one transaction:

* every GPU update carries the capacity invariant in its WHERE clause
  (exclusive: the GPU is idle, healthy and not in MIG mode; shared: not
  exclusive, healthy, not in MIG mode,
  and enough free memory outside the GPU's ``memory_reserved``), so the
  database itself refuses a double booking, and the shares on a GPU never
  add up to more than its memory less the reserve; a MIG device is given
  only while it is healthy, held by no job, and its parent GPU is healthy and
  in MIG mode (``mig_devices.job_id`` is the allocation);
* the job moves PENDING → ALLOCATED only if it is still PENDING.

If any of those conditional updates touches no row the whole placement is
rolled back and reported as rejected; the next cycle reconsiders the job. Two
schedulers racing on one database can therefore never double-book a GPU.

A multi-node gang (``Plan.gangs``) is committed the same way, all its parts
in one transaction: every GPU of every node, or none. Its job row names rank
0's node and every GPU, and ``jobs.gang`` keeps the parts in rank order.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpudock.core.events import EventType
from gpudock.core.inventory import GpuHealth
from gpudock.core.job import JobState
from gpudock.scheduler.snapshot import GangPlacement, Placement, Plan
from gpudock.store import events as event_store
from gpudock.store import jobs as job_store
from gpudock.store.db import Database
from gpudock.store.models import AllocationRow, GpuRow, MigDeviceRow

log = logging.getLogger("gpudock.applier")


class _Rejected(Exception):
    pass


@dataclass(slots=True)
class ApplyResult:
    committed: list[Placement] = field(default_factory=list)
    rejected: list[tuple[Placement, str]] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)  # victims now asked to stop
    resized: list[int] = field(default_factory=list)  # elastic jobs now asked to restart
    committed_gangs: list[GangPlacement] = field(default_factory=list)

    @property
    def started(self) -> list[int]:
        """The jobs now ALLOCATED: committed placements and gangs, in that order."""
        return [p.job_id for p in self.committed] + [g.job_id for g in self.committed_gangs]


def apply_plan(db: Database, plan: Plan, now: float) -> ApplyResult:
    """Commit each placement atomically; record pending reasons. Never raises for conflicts."""
    result = ApplyResult()
    for placement in plan.placements:
        try:
            with db.write() as session:
                _commit_placement(session, placement, now)
        except _Rejected as exc:
            log.info("placement of job %s rejected: %s", placement.job_id, exc)
            result.rejected.append((placement, str(exc)))
        else:
            result.committed.append(placement)
    for gang in plan.gangs:
        try:
            with db.write() as session:
                _commit_gang(session, gang, now)
        except _Rejected as exc:
            log.info("placement of gang job %s rejected: %s", gang.job_id, exc)
            result.rejected.extend((part, str(exc)) for part in gang.parts[:1])
        else:
            result.committed_gangs.append(gang)
    if plan.preemptions:
        with db.write() as session:
            for preemption in plan.preemptions:
                if job_store.request_preemption(session, preemption, now):
                    result.preempted.append(preemption.victim_id)
    if plan.resizes:
        with db.write() as session:
            for resize in plan.resizes:
                if job_store.request_resize(session, resize, now):
                    result.resized.append(resize.job_id)
    if plan.pending:
        with db.write() as session:
            job_store.set_pending_reasons(session, plan.pending)
    return result


def _take_all(session: Session, placement: Placement, now: float) -> None:
    """Take every GPU of ``placement`` (conditionally) and record its allocations."""
    if placement.mig is not None and not _take_mig(session, placement.mig, placement):
        raise _Rejected(f"MIG device {placement.mig} is no longer free")
    for uuid in placement.gpu_uuids:
        if not _take_gpu(session, uuid, placement):
            raise _Rejected(f"GPU {uuid} no longer has room")
        session.add(
            AllocationRow(
                job_id=placement.job_id,
                node=placement.node,
                gpu_uuid=uuid,
                memory=placement.memory_per_gpu,
                created_at=now,
            )
        )


def _commit_gang(session: Session, gang: GangPlacement, now: float) -> None:
    """All parts of a gang, or (``_Rejected``, rolled back) none."""
    for part in gang.parts:
        _take_all(session, part, now)
    parts = [[part.node, list(part.gpu_uuids)] for part in gang.parts]
    first = gang.parts[0]
    payload = {"gang": parts, "memory_per_gpu": first.memory_per_gpu}
    event_store.append_for_job(
        session, EventType.JOB_PLACED, gang.job_id, now, payload, node=first.node
    )
    moved = job_store.transition(
        session,
        gang.job_id,
        JobState.PENDING,
        JobState.ALLOCATED,
        now,
        node=first.node,
        allocated_at=now,
        gpu_uuids=[uuid for part in gang.parts for uuid in part.gpu_uuids],
        gang=parts,
    )
    if not moved:
        raise _Rejected("job is no longer PENDING")


def _commit_placement(session: Session, placement: Placement, now: float) -> None:
    _take_all(session, placement, now)
    payload = {"gpus": list(placement.uuids), "memory_per_gpu": placement.memory_per_gpu}
    event_store.append_for_job(  # rolled back with the placement if it is rejected below
        session, EventType.JOB_PLACED, placement.job_id, now, payload, node=placement.node
    )
    moved = job_store.transition(
        session,
        placement.job_id,
        JobState.PENDING,
        JobState.ALLOCATED,
        now,
        node=placement.node,
        allocated_at=now,
        gpu_uuids=list(placement.uuids),
    )
    if not moved:
        raise _Rejected("job is no longer PENDING")


def _take_mig(session: Session, uuid: str, placement: Placement) -> bool:
    """Give MIG device ``uuid`` to the job: it is on the placement's node, healthy, held
    by no job, and its parent GPU is healthy and in MIG mode."""
    parent_ok = (
        select(GpuRow.uuid)
        .where(
            GpuRow.uuid == MigDeviceRow.parent_uuid,
            GpuRow.health == GpuHealth.OK.value,
            GpuRow.mig_mode.is_(True),
        )
        .exists()
    )
    stmt = (
        update(MigDeviceRow)
        .where(
            MigDeviceRow.uuid == uuid,
            MigDeviceRow.node == placement.node,
            MigDeviceRow.health == GpuHealth.OK.value,
            MigDeviceRow.job_id.is_(None),
            parent_ok,
        )
        .values(job_id=placement.job_id, version=MigDeviceRow.version + 1)
    )
    result = session.execute(stmt.execution_options(synchronize_session=False))
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def _take_gpu(session: Session, uuid: str, placement: Placement) -> bool:
    healthy = GpuRow.health == GpuHealth.OK.value
    whole = GpuRow.mig_mode.is_not(True)  # a MIG GPU's units are its MIG devices
    on_node = GpuRow.node == placement.node
    if placement.memory_per_gpu is None:
        stmt = (
            update(GpuRow)
            .where(
                GpuRow.uuid == uuid,
                on_node,
                healthy,
                whole,
                GpuRow.exclusive_job.is_(None),
                GpuRow.shared_jobs == 0,
                GpuRow.used_memory == 0,
            )
            .values(
                exclusive_job=placement.job_id,
                used_memory=GpuRow.memory_total,
                version=GpuRow.version + 1,
            )
        )
    else:
        share = placement.memory_per_gpu
        stmt = (
            update(GpuRow)
            .where(
                GpuRow.uuid == uuid,
                on_node,
                healthy,
                whole,
                GpuRow.exclusive_job.is_(None),
                GpuRow.memory_total - GpuRow.memory_reserved - GpuRow.used_memory >= share,
            )
            .values(
                used_memory=GpuRow.used_memory + share,
                shared_jobs=GpuRow.shared_jobs + 1,
                version=GpuRow.version + 1,
            )
        )
    result = session.execute(stmt.execution_options(synchronize_session=False))
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]
