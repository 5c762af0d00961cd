"""The agent's view of its node's containers: the engine's word, checked against the kernel's.

Containers are found by the ``gpudock.instance`` label (whatever the
instance: the server says which are its own). Whether one *runs* is the
kernel's word, not only the engine's: a container runs while a process
lives in its cgroup (``/proc/*/cgroup`` names the container id). An engine
killed in the middle of a start can come back without knowing that its
container runs (its record says ``created``), and an engine that is gone
knows nothing at all; the processes run on either way. Labels of a container
the engine cannot list come from its record under the engine's data root
(``containers/<id>/config.v2.json``).

Stopping one: the engine's ``rm -f`` when it answers, then SIGKILL to every
process still in the container's cgroup. That needs the host's PID
namespace and filesystem (a host-process agent; a Swarm-service agent
stops containers through the engine only).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker.errors

from gpudock.agent.protocol import ReportedContainer
from gpudock.executors.labels import LABEL_ATTEMPT, LABEL_INSTANCE, LABEL_JOB, parse_engine_time

log = logging.getLogger("gpudock.agent")

_ID = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")


class NodeEngine:
    """The node's engine (``client()`` makes a docker-py client of it) and its containers."""

    def __init__(self, client: Callable[[], Any], proc: Path = Path("/proc")) -> None:
        self._make = client
        self._client: Any = None
        self._proc = proc
        self.labels: dict[str, dict[str, str]] = {}  # gpudock containers seen: their labels
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

    # ----------------------------------------------------------------- listing

    def containers(self) -> list[ReportedContainer]:
        """Every container with a gpudock label (the engine's listing), running when the
        engine or the kernel says so. Raises when the engine does not answer."""
        api = self.client().api
        summaries = api.containers(all=True, filters={"label": LABEL_INSTANCE})
        live = self.processes()
        found, ended = [], {}
        for summary in summaries:
            cid, labels = summary["Id"], summary.get("Labels") or {}
            self.labels[cid] = labels
            running = summary.get("State") == "running" or cid in live
            if not running:
                ended[cid] = self.ended[cid] if cid in self.ended else _finished(api, cid)
            found.append(_reported(cid, summary, labels, running, ended.get(cid)))
        listed = {s["Id"] for s in summaries}
        for cid in live.keys() - listed:  # runs, but the engine does not list it
            labels = self.labels.get(cid) or self.recorded_labels(cid)
            if labels and LABEL_INSTANCE in labels:
                found.append(_reported(cid, {"Names": [cid[:12]]}, labels, True, None))
        self.ended = ended
        return found

    def stray(self, instance: str) -> list[str]:
        """gpudock containers of ``instance`` with live processes, engine or not."""
        result = []
        for cid in self.processes():
            labels = self.labels.get(cid) or self.recorded_labels(cid)
            if labels and labels.get(LABEL_INSTANCE) == instance:
                result.append(cid)
        return result

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

    def recorded_labels(self, container: str) -> dict[str, str] | None:
        """The labels in the engine's record of ``container`` (its data root), if any."""
        if self.data_root is None:
            return None
        try:
            data = json.loads(
                (self.data_root / "containers" / container / "config.v2.json").read_text()
            )
        except (OSError, ValueError):
            return None
        labels = (data.get("Config") or {}).get("Labels") or {}
        return {str(k): str(v) for k, v in labels.items()}

    def processes(self) -> dict[str, list[int]]:
        """``{container id: pids}`` of every process whose cgroup names a container."""
        found: dict[str, list[int]] = {}
        for entry in os.scandir(self._proc):
            if not entry.name.isdigit():
                continue
            try:
                text = Path(entry.path, "cgroup").read_text()
            except OSError:
                continue
            for line in text.splitlines():
                match = _ID.search(line.rsplit(":", 1)[-1])
                if match is not None:
                    found.setdefault(match.group(1), []).append(int(entry.name))
                    break
        return found

    # ------------------------------------------------------------------ kills

    def kill(self, container: str) -> bool:
        """Stop ``container`` now: SIGKILL to every process in its cgroup (the kernel
        answers at once, however slow the engine is), then the engine's ``rm -f``. True if
        anything was there to stop."""
        stopped = self.kill_processes(container)
        try:
            self.client().api.remove_container(container, force=True)
            stopped = True
        except docker.errors.NotFound:
            pass
        except (docker.errors.DockerException, OSError) as exc:
            log.info(
                "the engine did not remove %s (%s); its processes are killed", container[:12], exc
            )
            self.reset()
        return self.kill_processes(container) or stopped

    def kill_processes(self, container: str) -> bool:
        """SIGKILL every process in ``container``'s cgroup; True if there was one."""
        pids = self.processes().get(container, [])
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return bool(pids)


def _reported(
    cid: str, summary: dict[str, Any], labels: dict[str, str], running: bool, ended: float | None
) -> ReportedContainer:
    return ReportedContainer(
        id=cid,
        name=(summary.get("Names") or ["?"])[0].lstrip("/"),
        instance=labels.get(LABEL_INSTANCE),
        job=_int(labels.get(LABEL_JOB)),
        attempt=_int(labels.get(LABEL_ATTEMPT)),
        running=running,
        finished_at=None if running else ended,
    )


def _finished(api: Any, container: str) -> float | None:
    try:
        state = api.inspect_container(container).get("State") or {}
    except docker.errors.NotFound:
        return None
    return parse_engine_time(state.get("FinishedAt"))


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None
