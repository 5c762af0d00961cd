"""Read what ``/metrics`` reports from the store: one read-only session per scrape.

``read_store`` runs a short batch of SELECTs (GPUs, held allocations, nodes,
job counts, pending reasons, the snapshot the queue report needs and the
queues' usage history the controller published) and returns plain rows. It
never takes the scheduler's lock and never writes, so a scrape can neither
block nor be blocked by a scheduling cycle beyond the database's own
reader/writer rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpudock.core.job import JobState
from gpudock.metrics.gauges import GpuFacts, HeldGpu
from gpudock.queue import QueuesConfig, UsageHistory
from gpudock.queue.report import QueuesReport
from gpudock.scheduler.snapshot import Snapshot
from gpudock.services.queues import queue_report
from gpudock.store import published
from gpudock.store.models import AllocationRow, GpuRow, JobRow, NodeRow
from gpudock.store.snapshot import load_snapshot

HOLDING = tuple(s.value for s in JobState if s.holds_resources)
NOT_CONSIDERED = "unscheduled"  # pending reason of a job no cycle has looked at yet

# The statements, built once: building one allocates expression objects that
# refer to each other (cyclic garbage a scrape would leave on every call).
_GPUS = select(
    GpuRow.uuid,
    GpuRow.node,
    GpuRow.index,
    GpuRow.name,
    GpuRow.memory_total,
    GpuRow.emulated,
    GpuRow.health,
    GpuRow.used_memory,
    GpuRow.exclusive_job,
).order_by(GpuRow.node, GpuRow.index)
_HELD = (
    select(
        AllocationRow.gpu_uuid,
        AllocationRow.job_id,
        JobRow.user,
        JobRow.queue,
        AllocationRow.memory,
    )
    .join(JobRow, JobRow.id == AllocationRow.job_id)
    .where(JobRow.state.in_(HOLDING))
)
_NODES = select(NodeRow.name, NodeRow.status, NodeRow.taints)
_JOBS = select(JobRow.state, JobRow.queue, func.count()).group_by(JobRow.state, JobRow.queue)
_LAYER = JobRow.pending_reasons[0]["layer"].as_string()  # the first reason's layer
_PENDING = (
    select(JobRow.queue, _LAYER, func.count())
    .where(JobRow.state == JobState.PENDING.value)
    .group_by(JobRow.queue, _LAYER)
)


@dataclass(frozen=True, slots=True)
class NodeFacts:
    name: str
    ready: bool
    cordoned: bool


@dataclass(frozen=True, slots=True)
class StoreFacts:
    """Everything one scrape reports from the store."""

    gpus: tuple[GpuFacts, ...]
    held: tuple[HeldGpu, ...]
    nodes: tuple[NodeFacts, ...]
    jobs: dict[tuple[str, str], int]  # (state, queue) -> count
    pending: dict[tuple[str, str], int]  # (queue, reason layer) -> count
    queues: QueuesReport
    history: UsageHistory | None  # the queues' decayed usage, as of the snapshot


def read_store(
    session: Session, now: float, queues: QueuesConfig, snapshot: Snapshot | None = None
) -> StoreFacts:
    """One scrape's facts, read in ``session`` (read-only).

    The queue report is computed from ``snapshot`` (the controller's latest,
    at most one scheduling cycle old, with its usage history) when given, else
    from a snapshot loaded here, the one expensive query of a scrape, with the
    published usage history advanced to it (``store/published.py``).
    """
    if snapshot is None:
        snapshot = load_snapshot(session, now)
        history = published.history_at(session, snapshot, queues.fair_share.half_life)
    else:
        history = snapshot.queue_history
    return StoreFacts(
        gpus=gpu_facts(session),
        held=_held(session),
        nodes=_nodes(session),
        jobs={(state, queue): count for state, queue, count in session.execute(_JOBS)},
        pending=_pending_reasons(session),
        queues=queue_report(snapshot, queues, history),
        history=history,
    )


def gpu_facts(session: Session) -> tuple[GpuFacts, ...]:
    """Every GPU's facts, in node and index order (one read; also the dashboard's)."""
    rows = session.execute(_GPUS)
    return tuple(
        GpuFacts(uuid, node, index, name, total, bool(emu), health, used, exclusive is not None)
        for uuid, node, index, name, total, emu, health, used, exclusive in rows
    )


def _held(session: Session) -> tuple[HeldGpu, ...]:
    rows = session.execute(_HELD)
    return tuple(
        HeldGpu(uuid, job_id, user, queue, memory is not None)
        for uuid, job_id, user, queue, memory in rows
    )


def _nodes(session: Session) -> tuple[NodeFacts, ...]:
    rows = session.execute(_NODES)
    return tuple(
        NodeFacts(name, status == "available", any(":NoSchedule" in t for t in taints or ()))
        for name, status, taints in rows
    )


def _pending_reasons(session: Session) -> dict[tuple[str, str], int]:
    """Pending jobs per (queue, layer of their first reason), counted by the database."""
    rows = session.execute(_PENDING)
    return {(queue, reason or NOT_CONSIDERED): count for queue, reason, count in rows}
