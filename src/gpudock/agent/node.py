"""Node services: per-node checks that need the node's own processes, run by the agent.

A node service is one class with a ``name``, a constructor taking the
``NodeContext`` and ``start``/``stop``; the agent starts every class in
``NODE_SERVICES`` once it knows its node (after its first report) and stops
them when it ends. A service reads what the agent knows through the
context: the node's name, its Docker engine, the attempts the server
assigns to it and the GPUs they hold (refreshed at every report), and it
may log and kill containers through ``NodeContext.kill``. Adding one (the
GPU-memory watchdog, say) is one module plus one line in ``NODE_SERVICES``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpudock.agent.protocol import AgentOrders


@dataclass
class NodeContext:
    """What the agent shares with node services. ``orders`` is the latest answer of
    the server (None before the first); read it under ``lock``."""

    node: str
    docker: Callable[[], Any]  # a docker-py client of the node's engine
    kill: Callable[[str, str], None]  # kill(container id, why): stop and remove it
    orders: AgentOrders | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)

    def latest(self) -> AgentOrders | None:
        with self.lock:
            return self.orders


class NodeService(Protocol):
    """One per-node check (see module docstring)."""

    name: str

    def start(self) -> None:
        """Begin (in a thread of its own if it loops); must return promptly."""

    def stop(self) -> None:
        """End; returns once its threads ended."""


NodeServiceFactory = Callable[[NodeContext], NodeService]

NODE_SERVICES: list[NodeServiceFactory] = []
"""The node services every agent runs, in order (the GPU-memory watchdog goes here)."""
