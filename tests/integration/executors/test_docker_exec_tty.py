"""``DockerExecutor.exec_tty`` against the real dockerd: a TTY both ways, and hangup."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import wait_for

from gpudock.config import ExecutorConfig
from gpudock.core.job import container_name
from gpudock.executors.base import ExecSession, LaunchError, LaunchRequest
from gpudock.executors.docker import DockerExecutor

pytestmark = pytest.mark.docker


@pytest.fixture
def running(docker_api: Any, instance_id: str) -> Iterator[tuple[DockerExecutor, str]]:
    """An executor and the id of a running container of its instance."""
    executor = DockerExecutor(ExecutorConfig(), instance_id)
    job_id = random.randrange(10**8, 10**9)
    request = LaunchRequest(
        job_id=job_id,
        attempt=0,
        name=container_name("ttytest", job_id, 0),
        image=TEST_IMAGE,
        command=["sleep", "300"],
        env={},
        gpu_uuids=(),
    )
    yield executor, executor.launch(request).id
    executor.close()


def read_until(session: ExecSession, text: bytes) -> bytes:
    seen = b""
    while text not in seen:
        chunk = session.read()
        assert chunk, f"ended before {text!r}: {seen!r}"
        seen += chunk
    return seen


def processes(docker_api: Any, container: str) -> str:
    return str(docker_api.api.top(container)["Processes"])


def test_a_tty_session_types_resizes_and_reports_the_exit_code(
    running: tuple[DockerExecutor, str],
) -> None:
    executor, container = running
    session = executor.exec_tty(container, ["sh"], rows=30, cols=90)
    try:
        session.write(b"stty size\r")
        read_until(session, b"30 90")
        session.resize(41, 123)
        session.write(b"stty size; exit 7\r")
        rest = b""
        while chunk := session.read():
            rest += chunk
        assert b"41 123" in rest
        assert session.exit_code() == 7
    finally:
        session.close()


def test_hangup_ends_the_shell_and_every_process_it_started_nohup_included(
    running: tuple[DockerExecutor, str], docker_api: Any
) -> None:
    executor, container = running
    session = executor.exec_tty(container, ["sh"], rows=24, cols=80)
    reader = threading.Thread(target=lambda: [None for _ in iter(session.read, b"")])
    reader.start()
    session.write(b"nohup sleep 5678 >/dev/null 2>&1 & sleep 1234 & sleep 4321\r")
    wait_for(lambda: "4321" in processes(docker_api, container), 10, "the sleeps to start")

    session.hangup()
    session.close()

    reader.join(timeout=5)
    assert not reader.is_alive()  # close unblocks a read in another thread
    left = processes(docker_api, container)
    assert "1234" not in left and "4321" not in left and "5678" not in left
    assert "sleep 300" in left  # the job's own command is not the session's


def test_a_command_that_ignores_sighup_is_killed_after_the_grace(
    running: tuple[DockerExecutor, str], docker_api: Any
) -> None:
    executor, container = running
    session = executor.exec_tty(container, ["sh", "-c", "trap '' HUP; sleep 4321"], 24, 80)
    wait_for(lambda: "4321" in processes(docker_api, container), 10, "the sleep to start")

    session.hangup()
    session.close()

    assert "4321" not in processes(docker_api, container)


def test_a_container_that_is_gone_is_a_launch_error(running: tuple[DockerExecutor, str]) -> None:
    executor, container = running
    executor.remove(container)

    with pytest.raises(LaunchError, match="does not exist"):
        executor.exec_tty(container, ["sh"], rows=24, cols=80)
