"""The single-host server's side of the node GPU monitor (``gpus/node_monitor.py``).

``StoreSink`` answers the monitor from the store and the engine, and turns
what it finds into job and GPU state, each change in one short transaction
and every engine call outside it:

* over a memory limit: the job is flagged to stop (``gpu_memory``, the reason
  as its detail), its container stopped with the watchdog's grace; the
  finisher ends it FAILED with that reason, or requeues it while retries last;
* a fault that quarantines (``xid.FaultClass``): the GPU (a node problem: every
  GPU of the node) becomes ``quarantined`` with the fault as reason, and the
  jobs on it are stopped (``gpu_fault``): requeued without spending a retry,
  or failed, as ``gpus.health.on_fault`` says;
* an application fault: the GPU stays in service; a job of it that fails
  within the hour carries the fault in its reason (``fault_note``);
* a stray process, any fault: an event and a metric.

The node agent of a multi-host cluster implements ``NodeSink`` the same way
over the server's API.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from sqlalchemy import select

from gpudock.core.events import EventType
from gpudock.core.inventory import GpuHealth, GpuSharing
from gpudock.core.job import JobState, job_of_container
from gpudock.executors.base import ExecutorUnavailable
from gpudock.gpus.mps import MpsSetup
from gpudock.gpus.watchdog import Assignment, Offence, Stray
from gpudock.gpus.xid import FaultClass, GpuFault
from gpudock.runtime import finisher
from gpudock.runtime.context import RuntimeContext
from gpudock.store import events as event_store
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.models import GpuRow, JobRow, MigDeviceRow

log = logging.getLogger("gpudock.gpu_guard")

APP_FAULT_WINDOW = 3600.0
"""How long an application fault on a GPU is named in the reason of a job that fails there."""


class StoreSink:
    """``NodeSink`` for the server that manages this node's engine itself."""

    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        self._app_faults: dict[str, tuple[float, str]] = {}  # GPU -> (when, summary)

    def assignments(self) -> Sequence[Assignment]:
        """Jobs holding GPUs on this node: their GPUs and per-GPU share (None: whole)."""
        held = [s.value for s in JobState if s.holds_resources]
        stmt = select(JobRow.id, JobRow.gpu_uuids, JobRow.gpu_memory).where(
            JobRow.state.in_(held), JobRow.node == self.ctx.node_name
        )
        with self.ctx.db.read() as session:
            rows = session.execute(stmt).all()
        return [Assignment(job, tuple(gpus or ()), memory) for job, gpus, memory in rows if gpus]

    def job_of_container(self, container_id: str) -> int | None:
        """The job of this installation's container ``container_id`` (by its name)."""
        try:
            status = self.ctx.executor.inspect(container_id)
        except ExecutorUnavailable:
            return None
        if status is None:
            return None
        return job_of_container(self.ctx.instance_id, status.name)

    def over_limit(self, offence: Offence) -> None:
        payload = {
            "by": "gpu watchdog",
            "reason": offence.reason,
            "gpu": offence.gpu_uuid,
            "used": offence.used,
            "limit": offence.limit,
            "pid": offence.pid,
        }
        self._stop_job(offence.job_id, "gpu_memory", offence.reason, payload)

    def stray(self, stray: Stray, killed: bool) -> None:
        payload = {
            "uuid": stray.gpu_uuid,
            "pid": stray.pid,
            "used": stray.used,
            "container": stray.container,
            "killed": killed,
        }
        log.warning(
            "process %s%s uses %s bytes on GPU %s but belongs to no gpudock job%s",
            stray.pid,
            f" (container {stray.container[:12]})" if stray.container else "",
            stray.used,
            stray.gpu_uuid,
            "; killed" if killed else "",
        )
        with self.ctx.db.write() as session:
            event_store.append(
                session, EventType.GPU_STRAY, self.ctx.clock(), payload, node=self.ctx.node_name
            )
        self.ctx.metrics.gpu_stray(self.ctx.node_name, killed)

    def gpu_fault(self, fault: GpuFault) -> None:
        now, node = self.ctx.clock(), self.ctx.node_name
        payload = {
            "uuid": fault.gpu_uuid,
            "kind": fault.kind.value,
            "class": fault.fault_class.value,
            "code": fault.code,
            "summary": fault.summary,
        }
        with self.ctx.db.write() as session:
            event_store.append(session, EventType.GPU_FAULT, now, payload, node=node)
        self.ctx.metrics.gpu_fault(node, fault.kind.value, fault.fault_class.value)
        if fault.fault_class is FaultClass.APPLICATION:
            with self._lock:
                self._app_faults[fault.gpu_uuid] = (now, fault.summary)
            log.info("GPU %s: %s (the application's)", fault.gpu_uuid, fault.summary)
        elif fault.fault_class.quarantines:
            self._quarantine(fault)

    def sharing(self, mode: GpuSharing, mps: MpsSetup | None) -> None:
        self.ctx.mps = mps
        with self.ctx.db.write() as session:
            changed = inv_store.set_node_sharing(session, self.ctx.node_name, mode.value)
        if changed:
            log.info("node %s shares GPUs by %s", self.ctx.node_name, mode.value)

    def fault_note(self, gpu_uuids: Sequence[str], since: float | None) -> str | None:
        """``XID 31 (GPU memory page fault) on GPU-…``: an application fault on one of
        the GPUs since ``since`` (within ``APP_FAULT_WINDOW``), for a failure reason."""
        floor = max(since or 0.0, self.ctx.clock() - APP_FAULT_WINDOW)
        with self._lock:
            for uuid in gpu_uuids:
                seen = self._app_faults.get(uuid)
                if seen is not None and seen[0] >= floor:
                    return f"{seen[1]} on {uuid}"
        return None

    def _quarantine(self, fault: GpuFault) -> None:
        """Quarantine the GPU (every GPU of the node for a node problem); stop their jobs."""
        now = self.ctx.clock()
        if fault.fault_class is FaultClass.NODE:
            reason = f"node problem: {fault.summary} on {fault.gpu_uuid}"
        else:
            reason = f"{fault.summary}; needs a GPU reset"
        with self.ctx.db.write() as session:
            stmt = select(GpuRow.uuid).where(GpuRow.node == self.ctx.node_name)
            if fault.fault_class is not FaultClass.NODE:
                stmt = stmt.where(GpuRow.uuid == fault.gpu_uuid)
            uuids = list(session.scalars(stmt))
            for uuid in uuids:
                inv_store.set_gpu_health(session, uuid, GpuHealth.QUARANTINED, reason, now)
            slices = session.scalars(  # their MIG devices' jobs stop with them
                select(MigDeviceRow.uuid).where(MigDeviceRow.parent_uuid.in_(uuids))
            )
            held = {*uuids, *slices}
        log.error("GPU(s) %s quarantined: %s", ", ".join(uuids), reason)
        detail = f"{fault.summary} on {fault.gpu_uuid}"
        for job_id, _gpus, _memory in self._jobs_on(held):
            payload: dict[str, object] = {
                "by": "gpu health",
                "reason": detail,
                "gpu": fault.gpu_uuid,
            }
            self._stop_job(job_id, "gpu_fault", detail, payload)
        self.ctx.wake_scheduler.set()

    def _jobs_on(self, uuids: set[str]) -> list[tuple[int, tuple[str, ...], int | None]]:
        return [
            (a.job_id, a.gpu_uuids, a.memory_limit)
            for a in self.assignments()
            if uuids.intersection(a.gpu_uuids)
        ]

    def _stop_job(self, job_id: int, kind: str, detail: str, payload: dict[str, object]) -> None:
        """Flag the job to stop (first flag wins), then stop it with the watchdog's grace."""
        now = self.ctx.clock()
        with self.ctx.db.write() as session:
            flagged = job_store.request_stop(session, job_id, kind, detail[:128])
            if flagged:
                event_store.append_for_job(
                    session,
                    EventType.JOB_WATCHDOG_KILL,
                    job_id,
                    now,
                    payload,
                    node=self.ctx.node_name,
                )
            job = job_store.get_job(session, job_id)
        if not flagged or job is None:
            return
        grace = self.ctx.config.gpus.watchdog.grace
        self.ctx.run_once("stop", job_id, lambda: finisher.stop(self.ctx, job, grace))
