"""A ``gpudock server --backend swarm`` on the kit's Swarm, with an agent on every node.

The server process runs on the host and listens on the bridge address, so
the agents (in the nodes' namespaces) reach it and a cut link cuts them off.
Intervals are short (``FAST``): a node is lost 3 s after Swarm marks it
down, agents report twice a second.

::

    with swarm_server(swarm, tmp_path, db_url) as cs:
        cs.api.post("/v1/jobs", json=...)
        cs.agents["sw2"].kill9()
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from tests.kit.agents import NodeAgent
from tests.kit.server import ServerProcess, wait_for
from tests.kit.swarm import BRIDGE_ADDRESS, SwarmCluster

from gpudock.store import tokens as token_store
from gpudock.store.db import Database

GRACE = 3.0
INTERVAL = 0.5


def fast_config(swarm: SwarmCluster, **swarm_options: Any) -> dict[str, Any]:
    """A server config for the kit's Swarm with short intervals and a 3 s node grace."""
    return {
        "backend": "swarm",
        "reconcile_interval": "0.5s",
        "schedule_interval": "0.5s",
        "executor": {"stop_grace": "2s", "docker_url": swarm.manager.url},
        "swarm": {
            "node_grace": GRACE,
            "agent_interval": INTERVAL,
            "start_timeout": "60s",
            **swarm_options,
        },
        "job_defaults": {"cpus": 0.1, "memory": "64MiB"},
    }


@dataclass
class SwarmServer:
    swarm: SwarmCluster
    server: ServerProcess
    agents: dict[str, NodeAgent] = field(default_factory=dict)

    @property
    def api(self) -> httpx.Client:
        return self.server.api()

    @property
    def instance(self) -> str:
        return str(self.api.get("/healthz").json()["instance"])

    def node_token(self, node: str) -> str:
        response = self.api.post("/v1/tokens", json={"node": node})
        assert response.status_code == 201, response.text
        return str(response.json()["token"])

    def heal(self, timeout: float = 60.0) -> None:
        """Undo every fault: links up, daemons and agents running; then wait until every
        node is ready, takes jobs and is watched by its agent (fencing done)."""
        self.swarm.restore()
        for name, agent in self.agents.items():
            if not agent.running():
                self.start_agent(name)
        wait_for(self._whole, timeout, "every node ready, open and watched")

    def cancel_unfinished(self, timeout: float = 60.0) -> None:
        """Cancel every job not yet ended (one a failed test left), and wait for each to end,
        so the next test finds every GPU free."""
        unfinished = "PENDING,ALLOCATED,STARTING,RUNNING"
        listed = self.api.get("/v1/jobs", params={"state": unfinished, "limit": 1000})
        listed.raise_for_status()
        ids = [job["id"] for job in listed.json()]
        for job_id in ids:
            self.api.post(f"/v1/jobs/{job_id}/cancel")
        ended = {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"}
        wait_for(
            lambda: all(self.api.get(f"/v1/jobs/{i}").json()["state"] in ended for i in ids),
            timeout,
            f"jobs {ids} a test left running to end",
        )

    def _whole(self) -> bool:
        nodes = self.api.get("/v1/nodes").json()
        return len(nodes) == len(self.swarm.nodes) and all(
            n["engine_state"] == "ready" and n["status"] == "available" and n["agent"] == "watched"
            for n in nodes
        )

    def start_agent(self, node: str) -> NodeAgent:
        agent = self.agents.get(node)
        if agent is None:
            agent = NodeAgent(
                self.swarm.node(node), self.server.url, self.node_token(node), self.server.home
            )
            self.agents[node] = agent
        return agent.start()


def node_tokens(db_url: str, nodes: list[str]) -> dict[str, str]:
    """A node token per node, written straight into the (migrated) store, so that the
    agents can start while the server does."""
    db = Database.open(db_url)
    try:
        with db.write() as session:
            return {
                node: token_store.issue_token(
                    session, f"agent@{node}", False, time.time(), name="agent", node=node
                )[1]
                for node in nodes
            }
    finally:
        db.engine.dispose()


@contextlib.contextmanager
def swarm_server(
    swarm: SwarmCluster, home: Path, db_url: str, agents: bool = True, **swarm_options: Any
) -> Iterator[SwarmServer]:
    """Start the server (and an agent per node, at the same time); stop them after."""
    server = ServerProcess(
        home,
        db_url=db_url,
        emulate=None,
        config=fast_config(swarm, **swarm_options),
        host=BRIDGE_ADDRESS,
    )
    cs = SwarmServer(swarm, server)
    names = [n.node_name for n in swarm.nodes]
    tokens = node_tokens(db_url, names) if agents else {}
    try:
        server.start(wait=False)
        for name, token in tokens.items():
            cs.agents[name] = NodeAgent(swarm.node(name), server.url, token, home).start()
        server.wait_healthy()
        yield cs
    finally:  # the swarm keeps what the server made: its owner tears it down (or ``clean``s)
        for agent in cs.agents.values():
            agent.stop()
        server.stop()
