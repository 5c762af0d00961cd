"""The node agent's loop: report, obey, and fence by itself when cut off.

Each step (every ``interval`` seconds, the server's figure once it spoke):

1. list the node's gpudock containers (the engine), then read NVML;
2. report them (``POST /v1/agent/sync``), echoing the server's last nonce;
3. kill and remove what the orders name (the server's view is the authority);
4. the lease (its own thread, checked four times a second, so a report
   stuck on a dead link never delays it): when neither the server nor any
   Swarm manager has answered for ``lease`` seconds, the node is cut off, and
   the server will requeue its jobs once its grace ends: every container of
   the instance with a live process is stopped now, by the engine, or (the
   engine gone) by SIGKILL to the processes of its cgroup. The same when the
   engine itself has been gone that long. What it stopped is reported once
   the server answers again.

A server that is down while the managers answer changes nothing: the node is
not cut off, and no job is requeued behind its back. The order (list, then
report) is what makes a kill safe: a container listed before the report
belongs to an attempt the server had already placed, so it is assigned
unless that attempt has ended.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import httpx

from gpudock.agent.engine import NodeEngine
from gpudock.agent.gpus import NodeGpus, read_gpus
from gpudock.agent.metrics import exposition, serve
from gpudock.agent.node import NODE_SERVICES, NodeContext, NodeService
from gpudock.agent.protocol import AgentOrders, AgentReport, EnrollOut
from gpudock.agent.servers import Servers, parse_servers

log = logging.getLogger("gpudock.agent")

FIRST_RETRY = 1.0  # seconds between reports until the server first answered
LEASE_TICK = 0.25  # seconds between two checks of the lease
DEFAULT_LEASE = 50.0  # before the server said (its default grace 60 s less two intervals)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """``gpudock agent``'s options. ``server``: one URL, or several, comma-separated
    (the replicas of an HA control plane: ``agent/servers.py``)."""

    server: str
    token: str | None = None
    enroll_file: Path | None = None
    docker_url: str | None = None
    metrics_port: int = 9471  # 0: no /metrics
    metrics_host: str = "0.0.0.0"
    timeout: float = 5.0


class Agent:
    """One node's agent (see module docstring); ``step`` is one pass, ``run`` the loop."""

    def __init__(self, settings: AgentSettings, http: httpx.Client | None = None) -> None:
        self.settings = settings
        self.http = Servers(parse_servers(settings.server), settings.timeout, http)
        self.engine = NodeEngine(self._docker)
        self.token = settings.token
        self.node: str | None = None
        self.orders: AgentOrders | None = None
        self.gpus: NodeGpus | None = None
        self.fenced: list[str] = []  # stopped by the lease, not reported yet
        now = time.monotonic()
        self.last_answer = now  # when the last report the server answered was sent
        self.engine_seen = now
        self.context: NodeContext | None = None
        self.services: list[NodeService] = []
        self._lock = threading.Lock()
        self._managers_ok_until = 0.0

    def _docker(self) -> Any:
        url = self.settings.docker_url
        return docker.DockerClient(base_url=url, timeout=10) if url else docker.from_env(timeout=10)

    # ------------------------------------------------------------------ loop

    def run(self, stop: threading.Event) -> None:
        """Enroll if asked, serve /metrics, then step every interval until ``stop``."""
        if self.token is None:
            self.token = self._enroll(stop)
            if self.token is None:
                return
        server = None
        if self.settings.metrics_port:
            server = serve(self.settings.metrics_port, self.settings.metrics_host, self.page)
        lease = threading.Thread(target=self._lease_loop, args=(stop,), name="gpudock-lease")
        lease.daemon = True
        lease.start()
        try:
            while not stop.is_set():
                started = time.monotonic()
                self.step()
                interval = self.orders.interval if self.orders else FIRST_RETRY
                stop.wait(max(0.0, interval - (time.monotonic() - started)))
        finally:
            for service in self.services:
                service.stop()
            if server is not None:
                server.shutdown()

    def page(self) -> bytes:
        return exposition(self.node or "?", self.gpus, self.orders)

    def step(self) -> AgentOrders | None:
        """One pass (steps 1 to 4); returns the orders, None when the server did not answer."""
        try:
            containers = self.engine.containers()
            if self.engine.data_root is None:
                self.engine.swarm_managers()  # the data root and managers, once
            engine_ok = True
            self.engine_seen = time.monotonic()
        except (docker.errors.DockerException, OSError) as exc:
            log.warning("the node's Docker engine does not answer: %s", exc)
            self.engine.reset()
            containers, engine_ok = [], False
        self.gpus = read_gpus(self.node or "node")
        report = AgentReport(
            node=self.node,
            nonce=self.orders.nonce if self.orders else None,
            engine_ok=engine_ok,
            containers=containers,
            gpus=self.gpus.gpus,
            driver_version=self.gpus.driver_version,
            cuda_version=self.gpus.cuda_version,
            fenced=list(self.fenced),
        )
        orders = self._post(report)
        if orders is not None:
            with self._lock:
                self.fenced = [c for c in self.fenced if c not in report.fenced]
            self._obey(orders)
        return orders

    def _post(self, report: AgentReport) -> AgentOrders | None:
        """Send ``report``; the orders, or None. An answer renews the lease from when the
        report was *sent*: the server's sign of life is no earlier, so a slow answer never
        moves the agent's fence past the server's grace."""
        sent = time.monotonic()
        try:
            response = self.http.post(
                "/v1/agent/sync",
                content=report.model_dump_json(),
                headers={
                    "Authorization": f"Bearer {self.token}",
                    "Content-Type": "application/json",
                },
            )
        except httpx.HTTPError as exc:
            log.warning("the server does not answer: %s", exc)
            return None
        if response.status_code != 200:
            log.error(
                "the server refused the report (%s): %s", response.status_code, response.text[:300]
            )
            return None
        self.last_answer = sent
        orders = AgentOrders.model_validate_json(response.content)
        if self.node is None:
            self.node = orders.node
            log.info("agent of node %s (gpudock instance %s)", orders.node, orders.instance)
        if self.context is None:
            self._start_services(orders.node)
        assert self.context is not None
        with self.context.lock:
            self.orders = self.context.orders = orders
        return orders

    def _obey(self, orders: AgentOrders) -> None:
        for container in orders.kill:
            self.kill(container, "the server does not assign it to this node")
        for container in orders.remove:
            try:
                self.engine.kill(container)
            except (docker.errors.DockerException, OSError) as exc:
                log.warning("cannot remove stopped container %s: %s", container[:12], exc)

    def kill(self, container: str, why: str) -> None:
        """Stop and remove ``container`` (its processes, if the engine cannot)."""
        log.warning("killing container %s: %s", container[:12], why)
        self.engine.kill(container)

    # ------------------------------------------------------------------ lease

    def _lease_loop(self, stop: threading.Event) -> None:
        while not stop.wait(LEASE_TICK):
            try:
                self.lease()
            except Exception:  # the loop must outlive any one failure
                log.exception("the lease check failed; trying again")

    def lease(self) -> None:
        """Step 4: stop every container of the instance when cut off (see module docstring)."""
        if self.orders is None:
            return
        now, lease = time.monotonic(), self.orders.lease
        server_gone = now - self.last_answer > lease
        engine_gone = now - self.engine_seen > lease and not self._engine_answers()
        if not (engine_gone or (server_gone and not self._managers_answer())):
            return
        why = "no Docker engine" if engine_gone else "no server and no Swarm manager"
        instance = self.orders.instance
        targets = self.engine.stray(instance)  # the kernel's word: processes in their cgroups
        for container in targets:
            self.kill(container, f"{why} for {lease:g}s: the server requeues its jobs")
            with self._lock:
                if container not in self.fenced:
                    self.fenced.append(container)

    def _engine_answers(self) -> bool:
        """Whether the node's engine answers a ping now (then it counts as seen)."""
        try:
            self.engine.client().ping()
        except (docker.errors.DockerException, OSError):
            self.engine.reset()
            return False
        self.engine_seen = time.monotonic()
        return True

    def _managers_answer(self) -> bool:
        """Whether any Swarm manager accepts a TCP connection (the node is not cut off);
        a yes is trusted for a second."""
        if time.monotonic() < self._managers_ok_until:
            return True
        if self._probe_managers():
            self._managers_ok_until = time.monotonic() + 1.0
            return True
        return False

    def _probe_managers(self) -> bool:
        try:
            managers = self.engine.swarm_managers()
        except (docker.errors.DockerException, OSError):
            managers = self.engine.managers
        for address in managers:
            host, _, port = address.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=1.0):
                    return True
            except (OSError, ValueError):
                continue
        return False

    # --------------------------------------------------------------- services

    def _start_services(self, node: str) -> None:
        self.context = NodeContext(node=node, docker=self.engine.client, kill=self.kill)
        for factory in NODE_SERVICES:
            service = factory(self.context)
            service.start()
            self.services.append(service)
            log.info("node service %s started", service.name)

    # ------------------------------------------------------------- enrollment

    def _enroll(self, stop: threading.Event) -> str | None:
        """Trade the enrollment token for this node's token (a Swarm agent task)."""
        assert self.settings.enroll_file is not None
        secret = self.settings.enroll_file.read_text().strip()
        body = {
            "node_id": os.environ.get("GPUDOCK_NODE_ID", ""),
            "task_id": os.environ.get("GPUDOCK_TASK_ID", ""),
        }
        pause = 1.0
        while not stop.is_set():
            try:
                response = self.http.post(
                    "/v1/agent/enroll", json=body, headers={"Authorization": f"Bearer {secret}"}
                )
                if response.status_code == 200:
                    enrolled = EnrollOut.model_validate_json(response.content)
                    log.info("enrolled as the agent of node %s", enrolled.node)
                    return enrolled.token
                log.warning(
                    "enrollment refused (%s): %s", response.status_code, response.text[:300]
                )
            except httpx.HTTPError as exc:
                log.warning("the server does not answer enrollment: %s", exc)
            stop.wait(pause)
            pause = min(30.0, pause * 2)
        return None
