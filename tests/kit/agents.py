"""Real ``gpudock agent`` processes on the kit's Swarm nodes (``tests/kit/swarm.py``).

Each agent runs in its node's network namespace (``nsenter --net``), so a
cut link cuts it off with its node, and talks to its node's private dockerd.
Its NVML is the stand-in library (``tests/kit/fake_nvml``) with the node's
own GPU UUIDs, so the agent's real pynvml code paths report what the node
declares. ``/metrics`` listens on the node's address.

::

    agent = NodeAgent(node, server_url, token, workdir)
    agent.start(); agent.kill9(); agent.start(); agent.stop()
    agent.metrics()                          # GET http://10.99.0.1N:9471/metrics
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
from tests.kit.fake_nvml import STATE_ENV, FakeNvml, build_fake_nvml, default_state, fake_gpu
from tests.kit.server import gpudock_bin
from tests.kit.swarm import GPU_MODEL, SwarmNode

METRICS_PORT = 9471
GIB = 1024**3


class NodeAgent:
    """One agent process of one kit node."""

    def __init__(self, node: SwarmNode, server: str, token: str, workdir: Path) -> None:
        self.node, self.server, self.token = node, server, token
        self.workdir = workdir / f"agent-{node.node_name}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        lib = build_fake_nvml(self.workdir / "lib")
        state = default_state(0)
        state["gpus"] = [
            fake_gpu(
                i,
                uuid=uuid,
                name=GPU_MODEL,
                memory_total=80 * GIB,
                telemetry={"utilization": 0, "temperature": 40, "power_mw": 70000},
            )
            for i, uuid in enumerate(node.gpus)
        ]
        self.nvml = FakeNvml(lib.parent, self.workdir / "nvml-state.txt", state)
        self.nvml.write()
        self.log_path = self.workdir / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> NodeAgent:
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(self.nvml.lib_dir),
            STATE_ENV: str(self.nvml.state_path),
        }
        args = [
            "nsenter",
            f"--net=/run/netns/{self.node.name}",
            gpudock_bin(),
            "agent",
            "--server",
            self.server,
            "--token",
            self.token,
            "--docker-url",
            self.node.url,
            "--metrics-host",
            self.node.address,
            "--metrics-port",
            str(METRICS_PORT),
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.running():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
                os.killpg(self.proc.pid, signal.SIGCONT)
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        """Freeze the agent (SIGSTOP): a hung agent, which fences nothing."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.running():
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)  # a paused agent must see the TERM
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill9()

    def metrics(self) -> str:
        url = f"http://{self.node.address}:{METRICS_PORT}/metrics"
        deadline = time.monotonic() + 15
        while True:
            try:
                return httpx.get(url, timeout=2).text
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""
