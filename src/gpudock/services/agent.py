"""Node agents: their reports (fencing, inventory, readings), enrollment and deployment.

The server's view is the authority (``agent/protocol.py``): a report lists
the node's gpudock containers; every running one whose job and attempt the
server does not assign to that node now is to be killed; a stopped one of
an ended attempt is removed after ``swarm.keep_exited``. A node token acts
only for its own node (403 otherwise). A returning node (``core/cluster.py``)
reopens when a report that echoes its nonce has nothing to kill.

Enrollment: a task of the Swarm agent service (``gpudock swarm
deploy-agent``) holds the enrollment token and proves its node by its task
id: the manager must say that task is the agent service's and runs on that
node; it then gets a node token for that node.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.agent.protocol import (
    AgentOrders,
    AgentReport,
    EnrollOut,
    EnrollRequest,
    HeldGpuOut,
    ReportedContainer,
)
from gpudock.core.cluster import lease, node_status
from gpudock.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpudock.core.events import EventType
from gpudock.core.inventory import GpuHealth, GpuInfo, NodeInventory
from gpudock.core.job import JobState
from gpudock.executors.base import ExecutorUnavailable, ExecutorWithAgentService
from gpudock.gpus.telemetry import GpuTelemetry
from gpudock.runtime.context import RuntimeContext
from gpudock.store import cluster as cluster_store
from gpudock.store import events as event_store
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store import tokens as token_store
from gpudock.store.models import AllocationRow, JobRow, NodeRow
from gpudock.store.tokens import ENROLL, Principal

log = logging.getLogger("gpudock.agent")

HOLDING = [s.value for s in JobState if s.holds_resources]
ENROLLED_BY = "enrollment"  # created_by of the node tokens enrollment issues


@dataclass(frozen=True, slots=True)
class Assignment:
    """What the server assigns to one node now."""

    attempts: set[tuple[int, int]]
    held: list[HeldGpuOut]


class AgentService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    # ------------------------------------------------------------------ sync

    def sync(self, principal: Principal, report: AgentReport) -> AgentOrders:
        """Record the report and answer with orders (see module docstring).

        ``Forbidden`` for a token of another node (or an enrollment token),
        ``Conflict`` on a one-host backend, ``NotFound`` for an unknown node.
        """
        report = report.model_copy(update={"node": report.node or principal.node})
        self._check_node(principal, report.node)
        assert report.node is not None
        now, swarm = self.ctx.clock(), self.ctx.config.swarm
        with self.ctx.db.read() as session:
            row = session.get(NodeRow, report.node)
            if row is None or row.engine_id is None:
                raise NotFound(f"unknown node {report.node!r}: not a node of the swarm")
            assigned = _assignment(session, report.node)
        ours = [c for c in report.containers if c.instance == self.ctx.instance_id]
        kill = [c.id for c in ours if c.running and _key(c) not in assigned.attempts]
        remove = [
            c.id
            for c in ours
            if not c.running
            and _key(c) not in assigned.attempts
            and c.finished_at is not None
            and now - c.finished_at >= swarm.keep_exited
        ]
        nonce = self._record(report, kill, now)
        self._telemetry(report)
        return AgentOrders(
            instance=self.ctx.instance_id,
            node=report.node,
            interval=swarm.agent_interval,
            lease=lease(swarm.node_grace, swarm.agent_interval),
            nonce=nonce,
            kill=kill,
            remove=remove,
            assigned=[[job, attempt] for job, attempt in sorted(assigned.attempts)],
            held=assigned.held,
        )

    def _check_node(self, principal: Principal, node: str | None) -> None:
        if principal.node == ENROLL:
            raise Forbidden("an enrollment token only enrolls agents (POST /v1/agent/enroll)")
        if principal.node != node:
            raise Forbidden(
                f"this node token acts only for node {principal.node}, not for node {node}"
            )
        if not self.ctx.cluster:
            raise Conflict(
                f"node agents report to a multi-node backend (backend: swarm); this server "
                f"runs backend {self.ctx.config.backend}"
            )

    def _record(self, report: AgentReport, kill: list[str], now: float) -> str | None:
        """Seen now; its GPUs; a fence confirmed or acted on. Returns the nonce to send."""
        name = report.node
        assert name is not None
        with self.ctx.db.write() as session:
            cluster_store.agent_seen(session, name, now)
            if report.gpus is not None:
                cluster_store.apply_agent_inventory(session, name, _inventory(report), now)
            row = session.get(NodeRow, name)
            assert row is not None
            pending = row.fence_nonce
            confirmed = (
                pending is not None
                and report.nonce == pending
                and not kill
                and report.engine_ok
                and cluster_store.confirm_fence(session, name, pending, now)
            )
            if confirmed or kill or report.fenced:
                payload = {"killed": kill, "self_fenced": report.fenced, "confirmed": confirmed}
                event_store.append(session, EventType.NODE_FENCED, now, payload, node=name)
            if confirmed:
                session.refresh(row)
                status, why = node_status(
                    cluster_store.facts(row), now, self.ctx.config.swarm.node_grace
                )
                inv_store.set_node_status(session, name, status, why, now)
            nonce = None if confirmed else pending
        if confirmed:
            log.warning("node %s: its agent confirmed fencing; it takes jobs again", name)
            self.ctx.wake_scheduler.set()
        if kill:
            log.warning(
                "node %s: its agent kills containers the server does not assign: %s",
                name,
                ", ".join(k[:12] for k in kill),
            )
        return nonce

    def _telemetry(self, report: AgentReport) -> None:
        if report.gpus is None or report.node is None:
            return
        self.ctx.node_telemetry[report.node] = {
            g.uuid: GpuTelemetry(g.utilization, g.memory_used, g.temperature, g.power)
            for g in report.gpus
        }

    # ------------------------------------------------------------ enrollment

    def enroll(self, principal: Principal, request: EnrollRequest) -> EnrollOut:
        """A node token for the node where the agent task ``request.task_id`` runs."""
        if principal.node != ENROLL:
            raise Forbidden("only the enrollment token of `gpudock swarm deploy-agent` enrolls")
        executor = self._agent_executor()
        try:
            where = executor.agent_task_node(request.task_id)
        except ExecutorUnavailable as exc:
            raise Conflict(
                f"cannot ask the swarm where task {request.task_id} runs: {exc}"
            ) from None
        if where is None:
            raise Forbidden(f"task {request.task_id} is no running task of the agent service")
        if where != request.node_id:
            raise Forbidden(
                f"task {request.task_id} runs on node {where}, not on node {request.node_id}"
            )
        now = self.ctx.clock()
        with self.ctx.db.write() as session:
            name = session.scalar(select(NodeRow.name).where(NodeRow.engine_id == where))
            if name is None:
                raise NotFound(f"node {where} is not registered yet; retry in a few seconds")
            # one enrolled token per node (an admin's own node tokens stay)
            token_store.revoke_node_tokens(session, name, now, created_by=ENROLLED_BY)
            _info, secret = token_store.issue_token(
                session,
                f"agent@{name}",
                False,
                now,
                name="agent",
                created_by=ENROLLED_BY,
                node=name,
            )
        log.info("node %s: agent task %s enrolled", name, request.task_id)
        return EnrollOut(node=name, token=secret)

    def deploy(self, principal: Principal, image: str, server_url: str, docker_socket: str) -> str:
        """Create (or update) the Swarm agent service; return its name. Admins only."""
        if not principal.is_admin:
            raise Forbidden("only an admin can deploy the node agent")
        for url in server_url.split(","):  # every replica's, comma-separated
            if not url.strip().startswith(("http://", "https://")):
                raise InvalidInput(
                    f"server URL {url.strip()!r} must start with http:// or https://",
                    field="server_url",
                )
        executor = self._agent_executor()
        now = self.ctx.clock()
        with self.ctx.db.write() as session:
            token_store.revoke_node_tokens(session, ENROLL, now)
            _info, secret = token_store.issue_token(
                session,
                "agent-enrollment",
                False,
                now,
                name="enrollment",
                created_by=principal.user,
                node=ENROLL,
            )
        try:
            return executor.deploy_agent(image, server_url, secret, docker_socket)
        except ExecutorUnavailable as exc:
            raise Conflict(f"the swarm refused the agent service: {exc}") from None

    def _agent_executor(self) -> ExecutorWithAgentService:
        executor = self.ctx.executor
        if not isinstance(executor, ExecutorWithAgentService):
            raise Conflict(
                f"backend {self.ctx.config.backend} has no agent service; run `gpudock agent` "
                "on each node (a systemd unit: deploy/systemd/gpudock-agent.service)"
            )
        return executor


def _key(container: ReportedContainer) -> tuple[int, int] | None:
    if container.job is None or container.attempt is None:
        return None
    return (container.job, container.attempt)


def _assignment(session: Session, node: str) -> Assignment:
    """The attempts (job, attempt) with a part on ``node`` now, and the GPUs they hold there."""
    active = job_store.list_jobs(session, states=job_store.ACTIVE_STATES, newest_first=False)
    attempts = {(j.id, j.attempt) for j in active if j.on_node(node)}
    rows = session.execute(
        select(
            AllocationRow.gpu_uuid,
            AllocationRow.job_id,
            AllocationRow.memory,
            JobRow.user,
            JobRow.queue,
        )
        .join(JobRow, JobRow.id == AllocationRow.job_id)
        .where(AllocationRow.node == node, JobRow.state.in_(HOLDING))
    )
    held = [
        HeldGpuOut(
            uuid=uuid, job=job, user=user, queue=queue, shared=memory is not None, memory=memory
        )
        for uuid, job, memory, user, queue in rows
    ]
    return Assignment(attempts, held)


def _inventory(report: AgentReport) -> NodeInventory:
    assert report.node is not None
    gpus = tuple(
        GpuInfo(
            index=g.index,
            uuid=g.uuid,
            name=g.name,
            memory_total=g.memory_total,
            health=GpuHealth.OK if g.healthy else GpuHealth.UNHEALTHY,
            numa=g.numa,
            nvlink=g.nvlink,
        )
        for g in report.gpus or ()
    )
    return NodeInventory(
        name=report.node,
        gpus=gpus,
        driver_version=report.driver_version,
        cuda_version=report.cuda_version,
        source=cluster_store.AGENT_SOURCE,
    )
