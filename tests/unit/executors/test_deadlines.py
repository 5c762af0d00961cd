"""Every engine call has a deadline, in the executor base class (any backend gets it).

A backend here is an in-memory stand-in whose engine work blocks, for one
container, until the test releases it: the base class must answer on time,
fail further calls about that container at once while the late one runs,
list the others as usual, and call the engine again once the late call ended.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from gpudock.executors.base import (
    ContainerState,
    ContainerStatus,
    EngineTimeout,
    Executor,
    LaunchRequest,
    ListedContainer,
)
from gpudock.executors.deadlines import Deadlines, EngineCalls

FAST = Deadlines(describe=0.2, call=0.3, launch=0.5)


class StuckEngine(Executor):
    """Containers ``a``, ``b`` and ``c``; any call about ``stuck`` blocks until ``release``."""

    def __init__(self) -> None:
        super().__init__(FAST)
        self.stuck = "b"
        self.release = threading.Event()
        self.calls: list[str] = []

    def _wait(self, name: str) -> None:
        self.calls.append(name)
        if name == self.stuck:
            self.release.wait(30)

    def _ping(self) -> None:
        return None

    def _launch(self, request: LaunchRequest) -> ContainerStatus:
        self._wait(request.name)
        return ContainerStatus(request.name, request.name, None, None, ContainerState.RUNNING)

    def _list(self) -> list[ListedContainer]:
        return [ListedContainer(n, n, job_id=i, attempt=0) for i, n in enumerate("abc")]

    def _inspect(self, name_or_id: str) -> ContainerStatus | None:
        self._wait(name_or_id)
        return ContainerStatus(name_or_id, name_or_id, None, 0, ContainerState.RUNNING)

    def _stop(self, name_or_id: str, grace_seconds: float) -> None:
        self._wait(name_or_id)

    def _logs(self, name_or_id: str, follow: bool = False) -> Iterator[bytes]:
        yield b"first\n"
        self._wait(name_or_id)
        yield b"second\n"

    def _remove(self, name_or_id: str) -> None:
        self._wait(name_or_id)


@pytest.fixture
def engine() -> Iterator[StuckEngine]:
    stand_in = StuckEngine()
    yield stand_in
    stand_in.release.set()


def test_a_listing_describes_every_container_but_the_one_the_engine_hangs_on(
    engine: StuckEngine,
) -> None:
    began = time.monotonic()
    listed = {c.name: c for c in engine.list_containers()}
    assert time.monotonic() - began < 1.0, "one inspect's deadline, not the engine's whim"
    assert listed["a"].state is listed["c"].state is ContainerState.RUNNING
    stuck = listed["b"]
    assert (stuck.state, stuck.job_id, stuck.finished) == (ContainerState.UNKNOWN, 1, False)
    assert stuck.error == "the engine did not answer describing container b within 0.2s"


def test_while_a_late_call_runs_further_calls_about_its_container_fail_at_once(
    engine: StuckEngine,
) -> None:
    with pytest.raises(EngineTimeout) as first:
        engine.stop("b", grace_seconds=0.1)
    assert first.value.target == "b"
    began = time.monotonic()
    for call in (lambda: engine.inspect("b"), lambda: engine.remove("b")):
        with pytest.raises(EngineTimeout, match="has not answered stopping container b for"):
            call()
    assert time.monotonic() - began < 0.1, "no second wait, no second call to the engine"
    assert engine.calls.count("b") == 1
    assert engine.inspect("a") is not None, "other containers are described as usual"

    engine.release.set()  # the engine answers again: once the late call ended, calls reach it
    status = _first_answer(lambda: engine.inspect("b"))
    assert status is not None and status.state is ContainerState.RUNNING
    assert engine.calls.count("b") == 2


def test_a_launch_past_its_deadline_raises_naming_its_container(engine: StuckEngine) -> None:
    request = LaunchRequest(
        job_id=1, attempt=0, name="b", image="img", command=None, env={}, gpu_uuids=()
    )
    with pytest.raises(EngineTimeout, match=r"did not answer starting container b within 0\.5s"):
        engine.launch(request)


def test_a_log_read_whose_next_chunk_does_not_come_in_time_raises(engine: StuckEngine) -> None:
    chunks = engine.logs("b")
    assert next(chunks) == b"first\n"
    with pytest.raises(EngineTimeout, match="reading the log of container b"):
        next(chunks)
    assert b"".join(engine.logs("a")) == b"first\nsecond\n"


def test_a_call_that_ends_in_time_returns_its_result_or_raises_its_own_error() -> None:
    calls = EngineCalls()
    assert calls.run("k", "a call", 1.0, lambda: 42) == 42

    def broken() -> None:
        raise ValueError("the engine's own error")

    with pytest.raises(ValueError, match="the engine's own error"):
        calls.run("k", "a call", 1.0, broken)
    assert calls.late() == {}


def _first_answer(call: Callable[[], ContainerStatus | None]) -> ContainerStatus | None:
    """``call()``'s first answer that is no ``EngineTimeout``, within 5 s."""
    deadline = time.monotonic() + 5
    while True:
        try:
            return call()
        except EngineTimeout:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
