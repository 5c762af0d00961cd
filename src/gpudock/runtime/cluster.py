"""The cluster watcher: a multi-node engine's nodes in the store, and node loss.

Runs in the controller when the executor has nodes (``ExecutorWithNodes``,
the Swarm backend). One pass, on each node event of the engine and at least
every ``PASS_SECONDS``:

1. list the engine's nodes (an engine that does not answer: nothing is
   judged, the pass ends);
2. one write: each node's row, GPUs, labels, state and availability
   (``store/cluster.py``); a node the engine no longer lists is ``removed``;
   a watched node that came back must be fenced (a fresh nonce, which its
   agent echoes once nothing stale runs there, ``services/agent.py``);
   each node's status (takes jobs or not, and why: ``core/cluster.py``);
3. node loss: for each node away longer than ``swarm.node_grace``, its jobs.
   On a watched (or removed) node they are lost: an unstarted one goes back
   to PENDING, a started one becomes LOST or is requeued per its
   ``retries``, and its services are removed. On an unwatched node they stay
   as they are, with a note saying so, until ``gpudock job requeue --force``
   or the node's return.

Decisions are the pure rules of ``core/cluster.py``; engine calls happen
outside every transaction.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable

from sqlalchemy.orm import Session

from gpudock.cluster_config import ClusterConfig
from gpudock.core.cluster import REMOVED, EngineNode, loss_due, node_status, watched
from gpudock.core.events import EventType
from gpudock.core.job import Job, JobState
from gpudock.executors.base import ExecutorUnavailable, ExecutorWithNodes, NodeEventStream
from gpudock.runtime import finisher
from gpudock.runtime.context import RuntimeContext
from gpudock.store import cluster as cluster_store
from gpudock.store import cluster_config as config_store
from gpudock.store import events as event_store
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.db import Database
from gpudock.store.models import NodeRow

log = logging.getLogger("gpudock.cluster")

PASS_SECONDS = 1.0


def nodes_of(ctx: RuntimeContext) -> ExecutorWithNodes:
    executor = ctx.executor
    assert isinstance(executor, ExecutorWithNodes)
    return executor


def sync_nodes(ctx: RuntimeContext) -> bool:
    """Steps 1 and 2; return whether the engine answered (False: nothing was changed)."""
    try:
        engine = nodes_of(ctx).nodes()
    except ExecutorUnavailable as exc:
        log.warning("cannot list the swarm's nodes: %s", exc)
        return False
    if store_nodes(ctx.db, engine, ctx.config.swarm.node_grace, ctx.clock()):
        ctx.wake_scheduler.set()
    return True


def store_nodes(db: Database, engine: list[EngineNode], grace: float, now: float) -> bool:
    """Step 2 for the engine's ``engine`` nodes; return whether a node opened for jobs."""
    opened = False
    with db.write() as session:
        applied = _applied_traits(session)
        for node in engine:
            synced = cluster_store.sync_engine_node(session, node, applied.get(node.name), now)
            if synced.new:
                log.info("node %s joined (%d GPUs)", node.name, len(node.gpus))
            row = session.get(NodeRow, node.name)
            if synced.returned and row is not None and row.agent_seen_at is not None:
                cluster_store.require_fence(session, node.name, secrets.token_hex(16), now)
                log.warning("node %s is back; closed until its agent confirms fencing", node.name)
        for name in cluster_store.mark_removed(session, {n.name for n in engine}, now):
            log.warning("node %s left the swarm", name)
        for row in cluster_store.cluster_nodes(session):
            status, reason = node_status(cluster_store.facts(row), now, grace)
            was = row.status
            inv_store.set_node_status(session, row.name, status, reason, now)
            opened = opened or (was != status.value and status.value == "available")
    return opened


def _applied_traits(session: Session) -> dict[str, tuple[dict[str, str], list[str]]]:
    """The applied config's labels and taints per node (``gpudock admin apply``)."""
    applied = config_store.latest(session)
    if applied is None:
        return {}
    try:
        stored = ClusterConfig.model_validate(applied.document)
    except ValueError:
        return {}
    return {name: (dict(t.labels), list(t.taints)) for name, t in stored.nodes.items()}


def handle_losses(ctx: RuntimeContext, noted: set[tuple[str, float]]) -> None:
    """Step 3 (see module docstring). ``noted`` remembers the unwatched losses already noted."""
    now, swarm = ctx.clock(), ctx.config.swarm
    detection = nodes_of(ctx).detection_delay()
    with ctx.db.read() as session:
        rows = [cluster_store.facts(r) for r in cluster_store.cluster_nodes(session)]
        interval = swarm.agent_interval
        due = [f for f in rows if loss_due(f, now, swarm.node_grace, interval, detection)]
        if not due:
            return
        active = job_store.list_jobs(session, states=job_store.ACTIVE_STATES, newest_first=False)
    for node in due:
        jobs = [j for j in active if j.on_node(node.name)]
        if not jobs:
            continue
        fenced = node.engine_state == REMOVED or watched(node, interval, detection)
        if fenced:
            why = f"node {node.name} lost ({node.engine_state} longer than the grace)"
            lost = [job.id for job in jobs if lose(ctx, job, node.name, why)]
            if lost:
                with ctx.db.write() as session:
                    payload = {"jobs": lost, "watched": True, "reason": why}
                    event_store.append(session, EventType.NODE_LOST, now, payload, node=node.name)
        elif (node.name, node.down_since or 0.0) not in noted:
            noted.add((node.name, node.down_since or 0.0))
            _note_unwatched(ctx, node.name, jobs)


def lose(ctx: RuntimeContext, job: Job, node: str, why: str) -> bool:
    """End ``job``'s attempt because its node is gone; remove its services. True if it
    was moved, or (a gang with members elsewhere) will be, in the control lane.

    Unstarted (ALLOCATED): back to PENDING, no retry used. Started: LOST, or
    PENDING while retries remain (one is used), as a vanished container. A
    gang's members on nodes that are still there are stopped first (SIGTERM,
    grace, SIGKILL), so their GPUs are not handed on while they run.
    """
    if job.container_name is not None and any(p.node != node for p in job.gang):
        name = job.container_name

        def stop_then_lose() -> None:
            try:
                ctx.executor.stop(name, ctx.config.executor.stop_grace)
            except ExecutorUnavailable as exc:  # the next pass tries again
                log.warning("job %s: its gang's other members not stopped yet: %s", job.id, exc)
                return
            _lose(ctx, job, node, why)

        return ctx.run_once("stop", job.id, stop_then_lose) is not None
    return _lose(ctx, job, node, why)


def _lose(ctx: RuntimeContext, job: Job, node: str, why: str) -> bool:
    with ctx.db.write() as session:
        fresh = job_store.get_job(session, job.id)
        if fresh is None or not fresh.state.holds_resources or fresh.attempt != job.attempt:
            return False
        fields: dict[str, object] = {}
        if fresh.state is JobState.ALLOCATED:
            target, reason = JobState.PENDING, f"{why} before the job started; requeued"
        else:
            outcome = finisher.maybe_retry(fresh, JobState.LOST, why)
            target, reason = outcome.state, outcome.reason
            if outcome.failed_attempt:
                fields["failures"] = fresh.failures + 1
        moved = job_store.transition(
            session, job.id, fresh.state, target, ctx.clock(), reason=reason, **fields
        )
    if not moved:
        return False
    log.warning("job %s: %s", job.id, reason, extra={"job": job.id, "node": node})
    ctx.wake_scheduler.set()
    if fresh.container_name is not None:
        name = fresh.container_name
        ctx.run_once("orphan", job.id, lambda: _remove(ctx, name))
    return True


def _remove(ctx: RuntimeContext, name: str) -> None:
    try:
        ctx.executor.remove(name)
    except ExecutorUnavailable as exc:  # the orphan pass removes it later
        log.info("services of %s not removed yet: %s", name, exc)


def _note_unwatched(ctx: RuntimeContext, node: str, jobs: list[Job]) -> None:
    """An unwatched node's jobs wait: say so, once per loss, on each job and in the event log."""
    why = (
        f"node {node} is lost and has no node agent to stop its containers; the job waits "
        f"until the node returns, or `gpudock job requeue ID --force` once you know it stopped"
    )
    now = ctx.clock()
    with ctx.db.write() as session:
        for job in jobs:
            job_store.note(session, job.id, why)
        payload = {"jobs": [j.id for j in jobs], "watched": False, "reason": why}
        event_store.append(session, EventType.NODE_LOST, now, payload, node=node)
    log.warning("%s (jobs %s)", why, ", ".join(str(j.id) for j in jobs), extra={"node": node})


class ClusterWatcher:
    """The watcher's two threads: engine node events, and the passes they (or a timer) wake."""

    def __init__(
        self, ctx: RuntimeContext, safe: Callable[[Callable[[RuntimeContext], object]], object]
    ) -> None:
        self.ctx = ctx
        self._safe = safe
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._noted: set[tuple[str, float]] = set()
        self._threads: list[threading.Thread] = []
        self._events: NodeEventStream | None = None

    def start(self) -> None:
        for name, target in (("nodes", self._pass_loop), ("node-events", self._event_loop)):
            thread = threading.Thread(target=target, name=f"gpudock-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        events = self._events
        if events is not None:
            events.close()
        for thread in self._threads:
            thread.join(timeout=10)

    def _pass_loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(timeout=PASS_SECONDS)
            self._wake.clear()
            if self._stop.is_set():
                return
            if self._safe(sync_nodes):
                self._safe(lambda ctx: handle_losses(ctx, self._noted))

    def _event_loop(self) -> None:
        executor = nodes_of(self.ctx)
        while not self._stop.is_set():
            try:
                self._events = executor.node_events()
            except ExecutorUnavailable:
                self._stop.wait(timeout=1.0)
                continue
            self._wake.set()
            for _node in self._events:
                self._wake.set()
            self._events = None
            self._stop.wait(timeout=0.5)
