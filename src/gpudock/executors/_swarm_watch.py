"""Change streams of the Swarm executor: attempts (by polling) and nodes (engine events).

A manager publishes no event when a task on another node starts or ends
(container events stay on that node), so ``ServicePoller`` lists the
instance's attempts every ``interval`` seconds and yields the name of each
whose state changed: one tasks call and one services call per poll,
whatever the number of jobs. Node state and availability changes do come as
``node`` events (``SwarmNodeEvents``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import docker.errors

from gpudock.executors.base import (
    ContainerEvent,
    ContainerState,
    ContainerStatus,
    EventStream,
    ExecutorUnavailable,
    NodeEventStream,
)


class ServicePoller(EventStream):
    """Yields an attempt's change as an event; ends when the manager stops answering.

    The action says what it became: ``start`` (running), ``die`` (ended),
    ``create`` (starting again) or ``destroy`` (gone). The first listing
    yields nothing (the controller reconciles everything when a stream opens).
    """

    def __init__(self, listing: Callable[[], list[ContainerStatus]], interval: float) -> None:
        self._listing = listing
        self._interval = interval
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[ContainerEvent]:
        try:
            seen = {s.name: _key(s) for s in self._listing()}
        except ExecutorUnavailable:
            return
        while not self._closed.wait(self._interval):
            try:
                now = {s.name: _key(s) for s in self._listing()}
            except ExecutorUnavailable:
                return
            for name in sorted(set(seen) | set(now)):
                if seen.get(name) != now.get(name):
                    yield ContainerEvent(name, _action(now.get(name)))
            seen = now

    def close(self) -> None:
        self._closed.set()


def _key(status: ContainerStatus) -> tuple[object, ...]:
    return (status.state, status.exit_code, status.id)


def _action(key: tuple[object, ...] | None) -> str:
    """The engine-event word for an attempt's new status (``key``; None: gone)."""
    if key is None:
        return "destroy"
    state = key[0]
    if state is ContainerState.RUNNING:
        return "start"
    if state in (ContainerState.EXITED, ContainerState.DEAD):
        return "die"
    return "create"


class SwarmNodeEvents(NodeEventStream):
    """The manager's ``node`` events, as the engine id of the node each one is about."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[str]:
        try:
            for event in self._stream:
                node = (event.get("Actor") or {}).get("ID")
                if node:
                    yield str(node)
        except (docker.errors.DockerException, OSError, ValueError, AttributeError):
            return

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()
