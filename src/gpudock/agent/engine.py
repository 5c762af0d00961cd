"""The agent's view of its node's Docker engine: gpudock's containers, and stopping them.

Containers are found by the ``gpudock.instance`` label (whatever the
instance: the server says which are its own). With the engine gone (killed,
hung) the agent can still stop a container: its init is SIGKILLed, which
ends every process of the container's PID namespace. Its pid comes from the
last listing, or else from the engine's own record of the container
(``<data root>/containers/<id>/config.v2.json``, which a dead engine leaves
behind); a pid is used only while ``/proc/<pid>/cgroup`` names the
container, so a reused pid is never hit. That needs the host's PID
namespace and filesystem (a host-process agent).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors

from gpudock.agent.protocol import ReportedContainer
from gpudock.executors.labels import LABEL_ATTEMPT, LABEL_INSTANCE, LABEL_JOB, parse_engine_time

log = logging.getLogger("gpudock.agent")


@dataclass(frozen=True, slots=True)
class Init:
    """A running container's init process (its host pid) and gpudock instance."""

    pid: int
    instance: str | None = None  # the container's gpudock instance


class NodeEngine:
    """The node's engine (``client()`` makes a docker-py client of it)."""

    def __init__(self, client: Callable[[], Any], proc: Path = Path("/proc")) -> None:
        self._make = client
        self._client: Any = None
        self._proc = proc
        self.inits: dict[str, Init] = {}  # running containers' init, from the last listing
        self.ended: dict[str, float | None] = {}  # stopped containers: when they stopped
        self.managers: list[str] = []  # the swarm's manager addresses, from the last info
        self.data_root: Path | None = None  # the engine's DockerRootDir, from the last info

    def client(self) -> Any:
        if self._client is None:
            self._client = self._make()
        return self._client

    def reset(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def containers(self) -> list[ReportedContainer]:
        """Every container with a gpudock label, running or not. Raises on an engine error."""
        api = self.client().api
        found = []
        seen: dict[str, Init] = {}
        ended: dict[str, float | None] = {}
        for summary in api.containers(all=True, filters={"label": LABEL_INSTANCE}):
            cid, labels = summary["Id"], summary.get("Labels") or {}
            running = summary.get("State") == "running"
            if running and cid in self.inits:
                seen[cid] = self.inits[cid]
            elif not running and cid in self.ended:
                ended[cid] = self.ended[cid]
            else:
                self._inspect(api, cid, labels, running, seen, ended)
            found.append(
                ReportedContainer(
                    id=cid,
                    name=(summary.get("Names") or ["?"])[0].lstrip("/"),
                    instance=labels.get(LABEL_INSTANCE),
                    job=_int(labels.get(LABEL_JOB)),
                    attempt=_int(labels.get(LABEL_ATTEMPT)),
                    running=running,
                    finished_at=None if running else ended.get(cid),
                )
            )
        self.inits, self.ended = seen, ended
        return found

    def _inspect(
        self,
        api: Any,
        cid: str,
        labels: dict[str, str],
        running: bool,
        seen: dict[str, Init],
        ended: dict[str, float | None],
    ) -> None:
        """Remember a new running container's init, or when a stopped one stopped."""
        try:
            state = api.inspect_container(cid).get("State") or {}
        except docker.errors.NotFound:
            return
        if not running:
            ended[cid] = parse_engine_time(state.get("FinishedAt"))
            return
        pid = int(state.get("Pid") or 0)
        if pid > 0:
            seen[cid] = Init(pid, labels.get(LABEL_INSTANCE))

    def swarm_managers(self) -> list[str]:
        """The managers' addresses (``host:port``) this node's engine knows; cached (with
        its data root)."""
        info = self.client().info()
        if info.get("DockerRootDir"):
            self.data_root = Path(info["DockerRootDir"])
        managers = [m["Addr"] for m in (info.get("Swarm") or {}).get("RemoteManagers") or ()]
        if managers:
            self.managers = managers
        return self.managers

    def kill(self, container: str) -> bool:
        """Stop and remove ``container`` now (SIGKILL); True if it was there. Raises on an
        engine error."""
        try:
            self.client().api.remove_container(container, force=True)
        except docker.errors.NotFound:
            return False
        return True

    def kill_init(self, container: str) -> bool:
        """SIGKILL the container's init (the engine is gone); True if it was still alive."""
        init = self.inits.get(container)
        pid = init.pid if init is not None else self.recorded().get(container)
        if pid is None or not _in_cgroup_of(self._proc, pid, container):
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            return True
        return False

    def recorded(self, instance: str | None = None) -> dict[str, int]:
        """Running gpudock containers (of ``instance``, or any) as the engine last recorded
        them under its data root: ``{container id: init pid}``. Never raises."""
        found: dict[str, int] = {}
        if self.data_root is None:
            return found
        for path in (self.data_root / "containers").glob("*/config.v2.json"):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            labels = (data.get("Config") or {}).get("Labels") or {}
            state = data.get("State") or {}
            if LABEL_INSTANCE not in labels or not state.get("Running") or not state.get("Pid"):
                continue
            if instance is None or labels[LABEL_INSTANCE] == instance:
                found[str(data.get("ID"))] = int(state["Pid"])
        return found


def _in_cgroup_of(proc: Path, pid: int, container: str) -> bool:
    """Whether process ``pid`` lives in container ``container``'s cgroup."""
    try:
        return container in (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return False


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
