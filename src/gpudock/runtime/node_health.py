"""This node's availability as the container engine reports it."""

from __future__ import annotations

import logging

from gpudock.core.inventory import NodeStatus
from gpudock.executors.base import ExecutorUnavailable, NodeUnavailable
from gpudock.runtime.context import RuntimeContext
from gpudock.store import inventory as inv_store

log = logging.getLogger("gpudock.node_health")


def mark_engine_down(ctx: RuntimeContext, exc: ExecutorUnavailable) -> None:
    """Mark this node unavailable because Docker does not answer (logged once per outage).

    On a multi-node engine nodes are the cluster watcher's to judge
    (``runtime/cluster.py``): an unreachable manager or a node that is down
    (``NodeUnavailable``) is logged, and no node is marked here.
    """
    if ctx.cluster or isinstance(exc, NodeUnavailable):
        log.info("engine: %s", exc)
        return
    with ctx.db.write() as session:
        changed = inv_store.set_node_status(
            session,
            ctx.node_name,
            NodeStatus.UNAVAILABLE,
            f"Docker daemon unreachable: {exc}",
            ctx.clock(),
        )
    if changed:
        log.warning(
            "node %s unavailable: Docker daemon unreachable: %s",
            ctx.node_name,
            exc,
            extra={"node": ctx.node_name},
        )
