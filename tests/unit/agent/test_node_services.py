"""Node services: one class plus one line in NODE_SERVICES; the agent starts and stops them."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gpudock.agent import node as node_module
from gpudock.agent.node import NodeContext
from gpudock.agent.protocol import AgentOrders
from gpudock.agent.runner import Agent, AgentSettings


class Recorder:
    name = "recorder"

    def __init__(self, context: NodeContext) -> None:
        self.context = context
        self.events: list[str] = []

    def start(self) -> None:
        self.events.append(f"start {self.context.node}")

    def stop(self) -> None:
        self.events.append("stop")


def test_the_agent_starts_each_node_service_with_its_node_and_stops_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    made: list[Recorder] = []

    def factory(context: NodeContext) -> Recorder:
        made.append(Recorder(context))
        return made[-1]

    monkeypatch.setattr(node_module, "NODE_SERVICES", [factory])
    monkeypatch.setattr("gpudock.agent.runner.NODE_SERVICES", [factory])
    agent = Agent(AgentSettings(server="http://127.0.0.1:1", token="t", metrics_port=0))
    agent._start_services("sw2")
    (service,) = made
    assert service.events == ["start sw2"]
    orders = AgentOrders(
        instance="i",
        node="sw2",
        interval=1,
        lease=5,
        nonce=None,
        kill=[],
        remove=[],
        assigned=[[4, 0]],
        held=[],
    )
    assert agent.context is not None
    with agent.context.lock:
        agent.context.orders = orders
    assert service.context.latest() is orders  # what the server assigns, at every report
    stop = threading.Event()
    stop.set()
    agent.run(stop)
    assert service.events == ["start sw2", "stop"]
