"""``gpudock exec -it JOB sh`` typed at through a pseudo-terminal, on a real server and dockerd."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import termios
import time
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import ServerProcess, gpudock_bin, submit, wait_for, wait_state

pytestmark = pytest.mark.docker


@pytest.fixture
def server(make_server: Any) -> ServerProcess:
    return make_server().start()  # type: ignore[no-any-return]


class Terminal:
    """``gpudock`` run on the slave side of a new pty; the test types on the master side."""

    def __init__(self, server: ServerProcess, token: str, *args: str, rows: int = 24) -> None:
        self.master, slave = pty.openpty()
        self.resize(rows, 80)
        self.settings = termios.tcgetattr(slave)
        env = {**server.env, "GPUDOCK_URL": server.url, "GPUDOCK_TOKEN": token}
        self.proc = subprocess.Popen(
            [gpudock_bin(), *args], stdin=slave, stdout=slave, stderr=slave, env=env
        )
        self.slave = slave
        self.seen = b""

    def resize(self, rows: int, cols: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def expect(self, text: str, timeout: float = 30) -> str:
        """Everything printed until ``text`` appears (fails after ``timeout``)."""
        deadline = time.monotonic() + timeout
        while text.encode() not in self.seen:
            assert time.monotonic() < deadline, f"no {text!r} in {self.seen!r}"
            if select.select([self.master], [], [], 0.2)[0]:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # EIO: the other side closed
                    break
        return self.seen.decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)
        os.close(self.slave)


def running_job(server: ServerProcess, token: str) -> int:
    job = submit(server.api(token), image=TEST_IMAGE, command=["sleep", "300"], gpus=1)
    wait_state(server.api(), job, {"RUNNING"})
    return job


def test_exec_it_gives_the_owner_a_shell_that_follows_the_terminal_and_its_exit_code(
    server: ServerProcess,
) -> None:
    alice = server.cli("token", "create", "--user", "alice").stdout.strip()
    job = running_job(server, alice)
    term = Terminal(server, alice, "exec", "-it", str(job), "sh", rows=30)
    try:
        term.expect("# ")
        term.type("stty size\r")
        term.expect("30 80")
        term.resize(41, 123)
        term.proc.send_signal(signal.SIGWINCH)
        time.sleep(0.5)  # the resize travels on its own; let it land before typing
        term.type("stty size\r")
        term.expect("41 123")
        term.type("echo $((6*7)); exit 3\r")

        assert term.proc.wait(timeout=60) == 3
        assert "\n42\r" in term.expect("42")
        assert termios.tcgetattr(term.slave) == term.settings  # raw mode undone
    finally:
        term.close()
    bob = server.cli("token", "create", "--user", "bob").stdout.strip()
    other = Terminal(server, bob, "exec", "-it", str(job), "sh")
    try:
        assert other.proc.wait(timeout=60) == 1
        said = other.expect(f"job {job} not found").strip()
        assert said == f"\033[31merror:\033[0m job {job} not found"  # red: stderr is a terminal
    finally:
        other.close()


def test_exec_it_ends_the_remote_shell_when_the_client_dies(
    server: ServerProcess, docker: Any
) -> None:
    job = running_job(server, server.admin_token)
    container = docker.containers.get(server.api().get(f"/v1/jobs/{job}").json()["container"])
    term = Terminal(server, server.admin_token, "exec", "-it", str(job), "sh")
    try:
        term.expect("# ")
        term.type("sleep 4321\r")
        wait_for(lambda: "4321" in str(container.top()), 15, "the sleep to start")
        term.proc.kill()  # no goodbye: the connection just drops
    finally:
        term.close()

    wait_for(lambda: "4321" not in str(container.top()), 15, "the remote shell to end")
