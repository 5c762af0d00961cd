"""``gpudock top`` under a real pseudo-terminal against a real server: the screen shows
the emulated GPUs and who holds them, the running job and the queues, it refreshes,
and ``q`` quits with the terminal restored."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from pathlib import Path

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.server import ServerProcess, gpudock_bin, submit, wait_state

pytestmark = pytest.mark.docker
ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


class Terminal:
    """A child process on a pty of ``cols`` x ``rows``; ``screen`` is its output, ANSI stripped."""

    def __init__(self, args: list[str], env: dict[str, str], cols: int = 140, rows: int = 50):
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(
            args, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        self.raw = b""

    def read_until(self, pattern: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.screen):
                return self.screen
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if ready:
                try:
                    self.raw += os.read(self.master, 65536)
                except OSError:  # the child closed the pty
                    break
        raise AssertionError(f"{pattern!r} never appeared; screen:\n{self.screen[-3000:]}")

    def drain(self, seconds: float) -> None:
        """Keep reading for ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.raw += os.read(self.master, 65536)
                except OSError:
                    return

    @property
    def screen(self) -> str:
        return ANSI.sub(b"", self.raw).decode(errors="replace")

    def press(self, key: bytes) -> None:
        os.write(self.master, key)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        os.close(self.master)


def test_top_shows_the_gpus_and_a_running_job_and_q_quits(
    server: ServerProcess, shots: Path
) -> None:
    with server.api() as api:
        job = submit(api, image=TEST_IMAGE, name="top-demo", gpus=1, command=["sleep", "60"])
        wait_state(api, job, {"RUNNING"})
    env = {
        **server.env,
        "GPUDOCK_URL": server.url,
        "GPUDOCK_TOKEN": server.admin_token,
        "TERM": "xterm-256color",
    }
    term = Terminal([gpudock_bin(), "top", "--interval", "0.5"], env)
    try:
        term.read_until(rf"admin:{job}")  # its GPU's cell names the holder
        term.read_until(rf"\b{job}\b.*admin.*RUNNING")  # and the jobs table lists it
        screen = term.read_until(r"Queues(.|\n)*default")
        assert "emu" in screen, "emulated GPUs are not marked"
        assert "idle" in screen
        shots.mkdir(parents=True, exist_ok=True)
        (shots / "top.txt").write_text(screen[screen.rindex("gpudock top") :])
        frames = screen.count("gpudock top")
        term.drain(2.5)
        assert term.screen.count("gpudock top") > frames, "the screen did not refresh"
        term.press(b"q")
        assert term.proc.wait(timeout=10) == 0
    finally:
        term.close()
        with server.api() as api:
            api.post(f"/v1/jobs/{job}/cancel")
