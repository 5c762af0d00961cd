"""Node availability on a multi-node engine: drain, cordon, uncordon (admins).

gpudock sets the engine's own availability (Swarm's ``drain``, ``pause``,
``active``), so the two never disagree; the node's row follows at once (the
cluster watcher would within a second). A drained or cordoned node takes no
new job; its running jobs go on (a Swarm drain does not stop job services).

Errors: ``Forbidden`` for a non-admin, ``NotFound`` for an unknown node,
``Conflict`` for a node already so (draining twice), one that is not the
engine's, or a one-host backend.
"""

from __future__ import annotations

import logging

from gpudock.core.errors import Conflict, Forbidden, NotFound
from gpudock.core.inventory import Node
from gpudock.executors.base import ExecutorUnavailable, ExecutorWithNodes, LaunchError
from gpudock.runtime.cluster import store_nodes
from gpudock.runtime.context import RuntimeContext
from gpudock.store import inventory as inv_store
from gpudock.store.models import NodeRow
from gpudock.store.tokens import Principal

log = logging.getLogger("gpudock.nodes")

ACTIONS = {"drain": "drain", "cordon": "pause", "uncordon": "active"}
"""gpudock's verb → the engine's availability."""
DONE = {"drain": "drained", "pause": "cordoned", "active": "taking jobs"}


class NodeControls:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def set_availability(self, name: str, action: str, principal: Principal) -> Node:
        """Apply ``action`` (``drain``, ``cordon`` or ``uncordon``) to node ``name``."""
        if not principal.is_admin:
            raise Forbidden(f"only an admin can {action} a node")
        executor = self.ctx.executor
        if not isinstance(executor, ExecutorWithNodes):
            raise Conflict(
                f"node availability belongs to a multi-node engine (backend: swarm); this "
                f"server runs backend {self.ctx.config.backend} (hold jobs, or stop the server)"
            )
        wanted = ACTIONS[action]
        node = self._node(name)
        if node.engine_state is None:
            raise Conflict(f"node {name} is not a node of the swarm")
        if node.availability == wanted:
            raise Conflict(f"node {name} is already {DONE[wanted]} (availability {wanted})")
        engine_id = self._engine_id(name)
        try:
            executor.set_availability(engine_id, wanted)
            engine = executor.nodes()
        except LaunchError as exc:
            raise NotFound(str(exc)) from None
        except ExecutorUnavailable as exc:
            raise Conflict(f"the swarm did not change node {name}: {exc}") from None
        if store_nodes(self.ctx.db, engine, self.ctx.config.swarm.node_grace, self.ctx.clock()):
            self.ctx.wake_scheduler.set()
        log.warning("node %s %s by %s", name, DONE[wanted], principal.user, extra={"node": name})
        return self._node(name)

    def _node(self, name: str) -> Node:
        with self.ctx.db.read() as session:
            nodes = inv_store.list_nodes(session)
        found = next((n for n in nodes if n.name == name), None)
        if found is None:
            names = ", ".join(n.name for n in nodes) or "none"
            raise NotFound(f"unknown node {name!r} (nodes: {names})")
        return found

    def _engine_id(self, name: str) -> str:
        with self.ctx.db.read() as session:
            row = session.get(NodeRow, name)
            engine_id = None if row is None else row.engine_id
        if engine_id is None:
            raise Conflict(f"node {name} is not a node of the swarm")
        return engine_id
