"""A real 3-node Docker Swarm on one machine, for the Swarm backend's tests and benchmark.

Each node is a private dockerd (``OwnDockerd``) in its own network
namespace, with a veth into one host bridge (``10.99.0.1/24``; the nodes
are ``.11``, ``.12``, ``.13``), as TESTING.md ("Docker Swarm") measured.
Never the shared engine on ``/var/run/docker.sock``. Each node declares its
emulated GPUs the way NVIDIA documents for Swarm:

* ``--node-generic-resource NVIDIA-GPU=<uuid>`` per GPU;
* engine labels ``gpudock.node`` (the node's name), ``gpudock.gpu.model``,
  ``gpudock.gpu.memory``; a Swarm node label ``kit.node=<name>`` (a job's
  ``node_selector`` pins it to a node);
* a default runtime named ``nvidia``: the stand-in
  ``fake_nvidia_runtime/nvidia-container-runtime``, which logs the UUIDs each
  container got (and when it started and ended) and refuses a UUID the node lacks;
* ``DOCKER_SERVICE_PREFER_OFFLINE_IMAGE=1``: no registry is reachable here,
  so a node uses its local image instead of trying a pull first
  (docs/operations.md, air-gapped nodes).

The manager (node 1) uses a 1 s dispatcher heartbeat, so a cut node is
``down`` in about 2 s instead of 15 s. Started once per test session (the
``swarm`` fixture of ``tests/conftest.py``); faults a test injects
(``kill9``, ``cut``) are undone by ``restore``.

::

    with SwarmCluster() as swarm:
        swarm.manager.url            # unix:///tmp/gpudock-sw1/docker.sock
        swarm.nodes[1].cut()         # ip link set gdsw2h down
        swarm.nodes[1].heal()
        swarm.nodes[2].kill9(); swarm.nodes[2].start()
        swarm.runtime_log()          # the stand-in runtime's records, all nodes
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType
from typing import Any

import docker
import docker.errors
from tests.kit.docker import TEST_IMAGE, docker_client, unavailable
from tests.kit.own_dockerd import OwnDockerd

BRIDGE = "gdsw0"
BRIDGE_ADDRESS = "10.99.0.1"
RUNTIME = Path(__file__).with_name("fake_nvidia_runtime") / "nvidia-container-runtime"
GPU_MODEL = "NVIDIA H100 80GB HBM3"
GPU_MEMORY = "80GiB"
HEARTBEAT_NS = 1_000_000_000


def gpu_uuid(node: str, index: int) -> str:
    """The stable UUID of emulated GPU ``index`` of node ``node``."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'gpudock-swarm/{node}/{index}')}"


class SwarmNode(OwnDockerd):
    """One node: a private dockerd in netns ``gpudock-swN`` behind veth ``gdswNh``."""

    def __init__(self, index: int, gpus: int) -> None:
        super().__init__(f"gpudock-sw{index}")
        self.index = index
        self.node_name = f"sw{index}"
        self.address = f"10.99.0.{10 + index}"
        self.veth = f"gdsw{index}h"
        self.gpus = [gpu_uuid(self.node_name, i) for i in range(gpus)]
        self.runtime_log = self.base.with_name(f"{self.name}.runtime.jsonl")
        self.engine_id = ""

    def daemon_args(self) -> list[str]:
        args = super().daemon_args()
        args += ["--label", f"gpudock.node={self.node_name}",
                 "--label", f"gpudock.gpu.model={GPU_MODEL}",
                 "--label", f"gpudock.gpu.memory={GPU_MEMORY}",
                 "--add-runtime", f"nvidia={self.base / 'nvidia-runtime'}",
                 "--default-runtime", "nvidia"]  # fmt: skip
        for gpu in self.gpus:
            args += ["--node-generic-resource", f"NVIDIA-GPU={gpu}"]
        return args

    def daemon_env(self) -> dict[str, str]:
        env = super().daemon_env()
        env["DOCKER_SERVICE_PREFER_OFFLINE_IMAGE"] = "1"
        return env

    def setup(self, image: bytes) -> None:
        """Namespace, veth into the bridge, the runtime wrapper, the daemon and the image."""
        self.teardown()
        self.base.mkdir(parents=True)
        subprocess.run(["ip", "netns", "add", self.name], check=True)
        inside = f"gdsw{self.index}n"
        _ip("link", "add", self.veth, "type", "veth", "peer", "name", inside)
        _ip("link", "set", inside, "netns", self.name)
        _ip("link", "set", self.veth, "master", BRIDGE, "up")
        for command in (
            ["link", "set", "lo", "up"],
            ["link", "set", inside, "name", "eth0"],
            ["addr", "add", f"{self.address}/24", "dev", "eth0"],
            ["link", "set", "eth0", "up"],
            ["route", "add", "default", "via", BRIDGE_ADDRESS],
        ):
            self.in_netns("ip", *command)
        wrapper = self.base / "nvidia-runtime"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'exec "{RUNTIME}" --log "{self.runtime_log}" --node {self.node_name} '
            f'--gpus {",".join(self.gpus)} -- "$@"\n'
        )
        wrapper.chmod(0o755)
        self.runtime_log.unlink(missing_ok=True)
        self.start()
        with contextlib.closing(self.client()) as own:
            own.images.load(image)

    def in_netns(self, *command: str) -> subprocess.CompletedProcess[str]:
        """Run ``command`` in this node's network namespace (``nsenter --net``)."""
        return subprocess.run(
            ["nsenter", f"--net=/run/netns/{self.name}", *command],
            check=True, capture_output=True, text=True,
        )  # fmt: skip

    def cut(self) -> None:
        """Cut the node's link: it can reach neither the manager nor the server."""
        _ip("link", "set", self.veth, "down")

    def heal(self) -> None:
        _ip("link", "set", self.veth, "up")

    def linked(self) -> bool:
        out = subprocess.run(
            ["ip", "-o", "link", "show", self.veth], capture_output=True, text=True
        )
        return "state UP" in out.stdout or ",UP" in out.stdout.split(">")[0]

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def teardown(self) -> None:
        """As ``OwnDockerd.teardown``, but the daemon is SIGKILLed first: a swarm node takes
        seconds to stop, and nothing of it is kept (its shims go too)."""
        self.kill9()
        subprocess.run(["ip", "link", "del", self.veth], capture_output=True, check=False)
        super().teardown()


class SwarmCluster:
    """Three (``size``) ``SwarmNode``s joined as one swarm; node 1 is the only manager."""

    def __init__(self, size: int = 3, gpus_per_node: int = 2) -> None:
        if os.geteuid() != 0 or not all(map(shutil.which, ("ip", "nsenter", "iptables"))):
            unavailable("a Swarm of private dockerds needs root, ip, nsenter and iptables")
        if not shutil.which("dockerd"):
            unavailable("dockerd is not installed")
        self.nodes = [SwarmNode(i + 1, gpus_per_node) for i in range(size)]

    @property
    def manager(self) -> SwarmNode:
        return self.nodes[0]

    def node(self, name: str) -> SwarmNode:
        return next(n for n in self.nodes if n.node_name == name)

    # ------------------------------------------------------------- lifecycle

    def __enter__(self) -> SwarmCluster:
        self.teardown()
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        # the shared dockerd sets FORWARD to DROP: let the nodes talk over the bridge
        subprocess.run(["iptables", "-N", "DOCKER-USER"], capture_output=True, check=False)
        subprocess.run(["iptables", "-I", "DOCKER-USER", *_RULE], check=True)
        try:
            with contextlib.closing(docker_client()) as shared:
                image = b"".join(shared.images.get(TEST_IMAGE).save(named=True))
            for node in self.nodes:
                node.setup(image)
            self._form()
        except BaseException:
            self.teardown()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.teardown()

    def _form(self) -> None:
        """``swarm init`` on the manager, ``swarm join`` for the others; wait until all Ready."""
        manager = self.manager.client()
        manager.swarm.init(
            advertise_addr=self.manager.address,
            listen_addr=f"{self.manager.address}:2377",
            dispatcher_heartbeat_period=HEARTBEAT_NS,
        )
        token = manager.swarm.attrs["JoinTokens"]["Worker"]
        for node in self.nodes:
            with contextlib.closing(node.client()) as client:
                if node is not self.manager:
                    client.swarm.join(
                        remote_addrs=[f"{self.manager.address}:2377"],
                        join_token=token,
                        advertise_addr=node.address,
                        listen_addr=f"{node.address}:2377",
                    )
                node.engine_id = client.info()["Swarm"]["NodeID"]
        for node in self.nodes:  # a Swarm node label, as an admin's `docker node update`
            attrs = manager.api.inspect_node(node.engine_id)
            spec = {**attrs["Spec"], "Labels": {"kit.node": node.node_name}}
            manager.api.update_node(node.engine_id, attrs["Version"]["Index"], spec)
        manager.close()
        self.wait_ready()

    def teardown(self) -> None:
        """Every node down (containers removed), the bridge and the iptables rule gone."""
        for node in self.nodes:
            node.teardown()
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
        while (
            subprocess.run(
                ["iptables", "-D", "DOCKER-USER", *_RULE], capture_output=True
            ).returncode
            == 0
        ):
            pass

    # --------------------------------------------------------------- queries

    def client(self) -> Any:
        """A docker-py client of the manager."""
        return docker.DockerClient(base_url=self.manager.url, timeout=30)

    def states(self) -> dict[str, str]:
        """``{node name: Swarm state}`` as the manager sees it (ready, down, ...)."""
        with contextlib.closing(self.client()) as client:
            nodes = client.api.nodes()
        by_id = {n.engine_id: n.node_name for n in self.nodes}
        return {by_id.get(n["ID"], n["ID"]): n["Status"]["State"] for n in nodes}

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(docker.errors.DockerException, OSError):
                states = self.states()
                if len(states) == len(self.nodes) and set(states.values()) == {"ready"}:
                    return
            if time.monotonic() > deadline:
                raise AssertionError(f"swarm not ready after {timeout}s: {self.states()}")
            time.sleep(0.1)

    def runtime_log(self) -> list[dict[str, Any]]:
        """Every record of the stand-in NVIDIA runtime on every node, oldest first."""
        records: list[dict[str, Any]] = []
        for node in self.nodes:
            with contextlib.suppress(FileNotFoundError):
                for line in node.runtime_log.read_text().splitlines():
                    if line.strip():
                        records.append(json.loads(line))
        return sorted(records, key=lambda r: float(r["time"]))

    def lives(self) -> dict[str, tuple[float, float]]:
        """Container id → (start, end) of every container started on any node, from the
        stand-in runtime's ``start`` and ``exit`` lines (one still running: ends now)."""
        starts: dict[str, float] = {}
        ends: dict[str, float] = {}
        for record in self.runtime_log():
            cid = record.get("container_id")
            if record["op"] == "start":
                starts.setdefault(cid, record["time"])
            elif record["op"] == "exit":
                ends.setdefault(cid, record["time"])
        return {cid: (start, ends.get(cid, time.time())) for cid, start in starts.items()}

    def commit_image(self, name: str, entrypoint: list[str]) -> str:
        """``TEST_IMAGE`` with another entrypoint, as image ``name`` on every node."""
        change = "ENTRYPOINT " + json.dumps(entrypoint)
        for node in self.nodes:
            with contextlib.closing(node.client()) as client:
                container = client.containers.create(TEST_IMAGE, ["true"])
                try:
                    container.commit(*name.split(":", 1), changes=[change])
                finally:
                    container.remove(force=True)
        return name

    # ----------------------------------------------------------------- repair

    def restore(self) -> None:
        """Undo injected faults: heal every link, start every stopped daemon, wait Ready."""
        for node in self.nodes:
            node.heal()
            if not node.running():
                node.start()
        self.wait_ready()

    def clean(self, instance: str) -> None:
        """Remove the services, networks and containers of gpudock instance ``instance``."""
        label = f"gpudock.instance={instance}"
        with contextlib.closing(self.client()) as client:
            for service in client.api.services(filters={"label": label}):
                with contextlib.suppress(docker.errors.NotFound):
                    client.api.remove_service(service["ID"])
            for network in client.api.networks(filters={"label": label}):
                with contextlib.suppress(docker.errors.APIError):
                    client.api.remove_network(network["Id"])
        for node in self.nodes:
            if not node.running():
                continue
            with contextlib.closing(node.client()) as client:
                for summary in client.api.containers(all=True, filters={"label": label}):
                    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                        client.api.remove_container(summary["Id"], force=True)


_RULE = ("-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)
