"""The Swarm executor's connection to its manager, and the swarm's nodes and agent service.

``SwarmEngine`` is the half of ``SwarmExecutor`` (``swarm.py``) that is not
about jobs: the manager's client and its errors, the check that the engine
is a manager (``prepare``), the nodes (``ExecutorWithNodes``) and the node
agent's global service (``ExecutorWithAgentService``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import docker.errors

from gpudock.config import ExecutorConfig, SwarmConfig
from gpudock.executors import _swarm_agent
from gpudock.executors._docker_pull import explanation
from gpudock.executors._swarm_spec import (
    NO_NEW_PRIVILEGES_API,
    Hardening,
    api_at_least,
    engine_nodes,
)
from gpudock.executors._swarm_stop import StopCapture
from gpudock.executors._swarm_watch import SwarmNodeEvents
from gpudock.executors.base import (
    AVAILABILITIES,
    BackendRefused,
    EngineNode,
    ExecutorUnavailable,
    ExecutorWithAgentService,
    ExecutorWithNodes,
    LaunchError,
    NodeEventStream,
)
from gpudock.executors.docker import deadlines_of

log = logging.getLogger("gpudock.executors.swarm")

CLIENT_TIMEOUT_SECONDS = 30


class SwarmEngine(ExecutorWithNodes, ExecutorWithAgentService):
    """The manager's client, the nodes and the agent service (see module docstring)."""

    def __init__(
        self, config: ExecutorConfig, swarm: SwarmConfig, instance_id: str, state_dir: Path
    ) -> None:
        if not instance_id:
            raise ValueError("instance_id must not be empty")
        super().__init__(deadlines_of(config))
        self.config, self.swarm, self.instance_id = config, swarm, instance_id
        self._client: Any = None
        self._lock = threading.Lock()
        self._node_ids: dict[str, str] = {}  # gpudock node name → Swarm node id
        self._detection: float | None = None  # detection_delay, once read
        self._hardening = Hardening()
        self._stops = StopCapture(state_dir / "swarm-stops")

    # ----------------------------------------------------------------- engine

    def _docker(self) -> Any:
        with self._lock:
            if self._client is None:
                url = self.config.docker_url
                try:
                    self._client = (
                        docker.DockerClient(base_url=url, timeout=CLIENT_TIMEOUT_SECONDS)
                        if url
                        else docker.from_env(timeout=CLIENT_TIMEOUT_SECONDS)
                    )
                except docker.errors.DockerException as exc:
                    raise ExecutorUnavailable(f"Docker engine unreachable: {exc}") from exc
            return self._client.api

    @contextlib.contextmanager
    def _call(self, what: str) -> Iterator[None]:
        """Engine errors of any kind as ``ExecutorUnavailable`` (``LaunchError`` passes)."""
        try:
            yield
        except (LaunchError, ExecutorUnavailable):
            raise
        except docker.errors.APIError as exc:
            raise ExecutorUnavailable(
                f"Swarm manager error while {what}: {explanation(exc)}"
            ) from exc
        except (docker.errors.DockerException, OSError) as exc:
            raise ExecutorUnavailable(f"Swarm manager unreachable while {what}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def prepare(self) -> None:
        """Refuse (``BackendRefused``) unless this host's engine is a Swarm manager."""
        try:
            api = self._docker()
            info = api.info()
            version = str(api.version().get("ApiVersion", ""))
        except (docker.errors.DockerException, OSError, ExecutorUnavailable) as exc:
            raise BackendRefused(
                f"the swarm backend cannot reach the Docker engine: {exc}"
            ) from None
        swarm = info.get("Swarm") or {}
        if swarm.get("LocalNodeState") != "active":
            raise BackendRefused(
                "the swarm backend needs this host's Docker engine to be a Swarm manager, but it "
                "is not in a swarm (run `docker swarm init`, or use backend: docker)"
            )
        if not swarm.get("ControlAvailable"):
            raise BackendRefused(
                "the swarm backend needs this host's Docker engine to be a Swarm manager, but it "
                "is a worker (run the server on a manager, or `docker node promote` this node)"
            )
        self._hardening = Hardening(api_at_least(version, NO_NEW_PRIVILEGES_API))
        if self.config.no_new_privileges and not self._hardening.no_new_privileges:
            log.warning(
                "Engine API %s cannot set no-new-privileges on Swarm services (1.44+ can); "
                "jobs run without it (docs/operations.md, what Swarm cannot express)",
                version,
            )

    def _ping(self) -> None:
        with self._call("pinging"):
            self._docker().ping()

    # ------------------------------------------------------------------ nodes

    def nodes(self) -> list[EngineNode]:
        with self._call("listing nodes"):
            found = engine_nodes(self._docker().nodes())
        with self._lock:
            self._node_ids = {n.name: n.engine_id for n in found}
        return found

    def node_events(self) -> NodeEventStream:
        with self._call("subscribing to node events"):
            stream = self._docker().events(decode=True, filters={"type": ["node"]})
        return SwarmNodeEvents(stream)

    def local_node(self) -> str:
        with self._call("reading this node's id"):
            return str(self._docker().info()["Swarm"]["NodeID"])

    def detection_delay(self) -> float:
        """Five of Swarm's dispatcher heartbeat periods (default 5 s: 25 s), read once;
        a manager that does not answer: the default's."""
        if self._detection is None:
            try:
                with self._call("reading the swarm's heartbeat"):
                    spec = self._docker().inspect_swarm().get("Spec") or {}
                period = (spec.get("Dispatcher") or {}).get("HeartbeatPeriod") or 5e9
                self._detection = 5 * float(period) / 1e9
            except ExecutorUnavailable:
                return 25.0
        return self._detection

    def set_availability(self, engine_id: str, availability: str) -> None:
        if availability not in AVAILABILITIES:
            raise ValueError(f"availability must be one of {AVAILABILITIES}")
        api = self._docker()
        with self._call("setting a node's availability"):
            try:
                node = api.inspect_node(engine_id)
            except docker.errors.NotFound:
                raise LaunchError(f"node {engine_id} is not in the swarm") from None
            spec = dict(node["Spec"])
            spec["Availability"] = availability
            api.update_node(engine_id, node["Version"]["Index"], spec)

    def deploy_agent(
        self, image: str, server_url: str, enroll_token: str, docker_socket: str
    ) -> str:
        """The agent's global service (``_swarm_agent.py``), created or updated."""
        with self._call("deploying the node agent"):
            return _swarm_agent.deploy_agent(
                self._docker(), self.instance_id, image, server_url, enroll_token, docker_socket
            )

    def agent_task_node(self, task_id: str) -> str | None:
        with self._call("inspecting an agent task"):
            return _swarm_agent.agent_task_node(self._docker(), self.instance_id, task_id)

    def _engine_id(self, node: str) -> str:
        with self._lock:
            known = self._node_ids.get(node)
        if known is None:
            self.nodes()
            with self._lock:
                known = self._node_ids.get(node)
        if known is None:
            raise LaunchError(f"node {node} is not in the swarm")
        return known
