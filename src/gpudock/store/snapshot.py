"""Build the scheduler's immutable ``Snapshot`` from the store in one read."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.core.inventory import GpuHealth, NodeStatus
from gpudock.core.job import JobState
from gpudock.scheduler.snapshot import GpuView, JobRequest, NodeView, Snapshot
from gpudock.store.models import GpuRow, JobRow, NodeRow


def load_snapshot(session: Session, now: float, limit: int | None = None) -> Snapshot:
    """Nodes with their GPUs' allocation state, and up to ``limit`` pending jobs."""
    gpus: dict[str, list[GpuView]] = {}
    for g in session.scalars(select(GpuRow).order_by(GpuRow.node, GpuRow.index)):
        gpus.setdefault(g.node, []).append(
            GpuView(
                uuid=g.uuid,
                index=g.index,
                name=g.name,
                memory_total=g.memory_total,
                used_memory=g.used_memory,
                exclusive=g.exclusive_job is not None,
                shared_jobs=g.shared_jobs,
                healthy=g.health == GpuHealth.OK.value,
            )
        )
    nodes = tuple(
        NodeView(
            name=n.name,
            gpus=tuple(gpus.get(n.name, ())),
            available=n.status == NodeStatus.AVAILABLE.value,
            unavailable_reason=n.status_reason if n.status != NodeStatus.AVAILABLE.value else None,
            labels=tuple(sorted((n.labels or {}).items())),
        )
        for n in session.scalars(select(NodeRow).order_by(NodeRow.name))
    )
    stmt = (
        select(
            JobRow.id,
            JobRow.gpus,
            JobRow.submitted_at,
            JobRow.gpu_memory,
            JobRow.gpu_model,
            JobRow.priority,
            JobRow.queue,
            JobRow.user,
        )
        .where(JobRow.state == JobState.PENDING.value)
        .order_by(JobRow.priority.desc(), JobRow.submitted_at, JobRow.id)
    )
    if limit is not None:
        stmt = stmt.limit(limit)
    pending = tuple(
        JobRequest(
            id=r.id,
            gpus=r.gpus,
            submitted_at=r.submitted_at,
            gpu_memory=r.gpu_memory,
            gpu_model=r.gpu_model,
            priority=r.priority,
            queue=r.queue,
            user=r.user,
        )
        for r in session.execute(stmt)
    )
    return Snapshot(now=now, nodes=nodes, pending=pending)
