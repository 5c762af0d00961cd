"""What the web dashboard's cluster page shows: every node and GPU, who holds what.

One read-only session per call (nodes, GPUs, held allocations); it never
takes the scheduler's lock. Live utilisation and memory come from NVML only
for this node's real GPUs; emulated GPUs report none and are marked so.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.core.job import JobState
from gpudock.gpus.nvml import NvmlUnavailable
from gpudock.gpus.telemetry import GpuTelemetry, read_telemetry
from gpudock.metrics.store import gpu_facts
from gpudock.runtime.context import RuntimeContext
from gpudock.store.models import AllocationRow, JobRow, NodeRow
from gpudock.store.tokens import Principal

log = logging.getLogger("gpudock.web")
HOLDING = tuple(s.value for s in JobState if s.holds_resources)
Telemetry = Callable[[], Mapping[str, GpuTelemetry]]


class DashboardService:
    def __init__(self, ctx: RuntimeContext, telemetry: Telemetry = read_telemetry) -> None:
        self.ctx = ctx
        self.telemetry = telemetry

    def cluster(self, principal: Principal) -> dict[str, Any]:
        """Nodes with their GPUs, each GPU with its booking, readings and holders.

        A holder names the user and queue of the job holding the GPU (or a
        share of it); the job id is given only to an admin or the job's owner.
        """
        with self.ctx.db.read() as session:
            nodes = _nodes(session)
            gpus = _gpus(session)
            holders = _holders(session, principal)
        readings = self._readings(gpus)
        by_node: dict[str, list[dict[str, Any]]] = {n["name"]: [] for n in nodes}
        for gpu in gpus:
            gpu["holders"] = holders.get(gpu["uuid"], [])
            reading = readings.get(gpu["uuid"])
            gpu["utilization"] = None if reading is None else reading.utilization
            gpu["memory_used"] = None if reading is None else reading.memory_used
            by_node.setdefault(gpu["node"], []).append(gpu)
        for node in nodes:
            node["gpus"] = by_node.get(node["name"], [])
        return {"user": principal.user, "admin": principal.is_admin, "nodes": nodes}

    def _readings(self, gpus: list[dict[str, Any]]) -> Mapping[str, GpuTelemetry]:
        """NVML readings, only when this node has real GPUs; {} when NVML fails."""
        if not any(g["node"] == self.ctx.node_name and not g["emulated"] for g in gpus):
            return {}
        try:
            return self.telemetry()
        except NvmlUnavailable as err:
            log.debug("no GPU telemetry: %s", err)
            return {}


def _nodes(session: Session) -> list[dict[str, Any]]:
    rows = session.execute(
        select(
            NodeRow.name, NodeRow.status, NodeRow.status_reason, NodeRow.gpu_source, NodeRow.taints
        ).order_by(NodeRow.name)
    )
    return [
        {
            "name": name,
            "status": status,
            "status_reason": reason,
            "gpu_source": source,
            "cordoned": any(":NoSchedule" in t for t in taints or ()),
        }
        for name, status, reason, source, taints in rows
    ]


def _gpus(session: Session) -> list[dict[str, Any]]:
    """Every GPU as the page shows it, from the same query ``/metrics`` reads."""
    return [
        {
            "uuid": g.uuid,
            "node": g.node,
            "index": g.index,
            "name": g.name,
            "memory_total": g.memory_total,
            "emulated": g.emulated,
            "health": g.health,
            "booked_memory": g.memory_total if g.exclusive else g.used_memory,
            "allocation": 1.0
            if g.exclusive
            else (g.used_memory / g.memory_total if g.memory_total else 0.0),
        }
        for g in gpu_facts(session)
    ]


def _holders(session: Session, principal: Principal) -> dict[str, list[dict[str, Any]]]:
    rows = session.execute(
        select(
            AllocationRow.gpu_uuid,
            AllocationRow.job_id,
            JobRow.user,
            JobRow.queue,
            JobRow.name,
            AllocationRow.memory,
        )
        .join(JobRow, JobRow.id == AllocationRow.job_id)
        .where(JobRow.state.in_(HOLDING))
        .order_by(AllocationRow.job_id)
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for uuid, job_id, user, queue, name, memory in rows:
        visible = principal.is_admin or user == principal.user
        found.setdefault(uuid, []).append(
            {
                "job": job_id if visible else None,
                "name": name if visible else None,
                "user": user,
                "queue": queue,
                "memory": memory,
            }
        )
    return found
