"""Stopping Swarm job services without losing their output, and reading service logs.

Swarm stops a job service's task only when the job's spec changes: set to
zero completions, its task gets desired state ``remove`` and its node stops
the container (SIGTERM, ``StopGracePeriod``, SIGKILL) and removes it, with
its logs. So ``StopCapture.stop`` follows each service's logs from before
the change until the task is gone, into ``<dir>/<name>.log``, and keeps the
final status in memory: the finisher then archives that file through
``SwarmExecutor.logs`` exactly as it archives a live container's logs.

A capture keeps at most ``CAPTURE_MAX_BYTES`` (the tail, after a note); a
server that dies mid-stop loses it (the attempt's archive is then empty).
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
from docker.types.daemon import CancellableStream

from gpudock.executors._swarm_spec import (
    BEFORE_RUNNING,
    LABEL_RANK,
    gang_status,
    latest_task,
)
from gpudock.executors.base import ContainerState, ContainerStatus

CAPTURE_MAX_BYTES = 256 * 1024 * 1024
STOP_SLACK_SECONDS = 20.0  # beyond the grace: the node's delay (the call's deadline is 30)
TAIL_SECONDS = 0.5  # after the task is gone, for the last lines still on their way
LIVE = BEFORE_RUNNING | {"running"}


class StopCapture:
    """Stops services with their logs captured; remembers what each stop ended as."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._final: dict[str, ContainerStatus] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ stop

    def stop(
        self, api: Any, name: str, services: list[dict[str, Any]], grace: float
    ) -> ContainerStatus | None:
        """Stop ``name``'s services, following their logs; return how the attempt ended.

        Returns once no task of them is live (or after ``grace`` plus
        ``STOP_SLACK_SECONDS``). None when no task was ever seen ending (they
        were gone already).
        """
        ordered = sorted(services, key=_rank)
        self.folder.mkdir(parents=True, exist_ok=True)
        parts = [self.folder / f"{name}.r{_rank(s)}.part" for s in ordered]
        readers = [_Follower(api, s["ID"], path) for s, path in zip(ordered, parts, strict=True)]
        for reader in readers:
            reader.start()
        for service in ordered:
            zero_completions(api, service["ID"])
        final = self._wait_stopped(api, name, ordered, grace + STOP_SLACK_SECONDS)
        time.sleep(TAIL_SECONDS)
        for reader in readers:
            reader.close()
        self._join(name, ordered, parts)
        return final

    def _wait_stopped(
        self, api: Any, name: str, services: list[dict[str, Any]], timeout: float
    ) -> ContainerStatus | None:
        deadline = time.monotonic() + timeout
        final: ContainerStatus | None = None
        labels = services[0]["Spec"].get("Labels") or {}
        while time.monotonic() < deadline:
            tasks = [latest_task(_service_tasks(api, s["ID"])) for s in services]
            ranked = [
                (_rank(s), str((s["Spec"].get("Labels") or {}).get("gpudock.node", "")), t)
                for s, t in zip(services, tasks, strict=True)
            ]
            if all(t is None or (t.get("Status") or {}).get("State") not in LIVE for t in tasks):
                if any(t is not None for t in tasks):
                    final = gang_status(name, ranked, labels)
                elif final is None:
                    final = _gone(name, labels)
                return final
            time.sleep(0.1)
        return final

    def _join(self, name: str, services: list[dict[str, Any]], parts: list[Path]) -> None:
        """Concatenate the ranks' captures into ``<name>.log`` (a gang: with rank headers)."""
        target = self.folder / f"{name}.log"
        with target.open("wb") as out:
            for service, part in zip(services, parts, strict=True):
                if len(services) > 1:
                    node = (service["Spec"].get("Labels") or {}).get("gpudock.node", "?")
                    out.write(f"==> rank {_rank(service)} (node {node}) <==\n".encode())
                if part.exists():
                    with part.open("rb") as src:
                        shutil.copyfileobj(src, out)
                    part.unlink()

    # ---------------------------------------------------------------- memory

    def remember(self, name: str, status: ContainerStatus) -> None:
        with self._lock:
            self._final[name] = status

    def status(self, name: str) -> ContainerStatus | None:
        """How a stop of ``name`` ended (this process's stops only)."""
        with self._lock:
            return self._final.get(name)

    def captured(self, name: str) -> Iterator[bytes] | None:
        """The captured output of a stopped attempt, or None when there is none."""
        path = self.folder / f"{name}.log"
        if not path.exists():
            return None
        return _chunks(path)

    def forget(self, name: str) -> None:
        with self._lock:
            self._final.pop(name, None)
        (self.folder / f"{name}.log").unlink(missing_ok=True)

    # ------------------------------------------------------------------ logs

    def service_logs(
        self, api: Any, services: list[dict[str, Any]], follow: bool
    ) -> Iterator[bytes]:
        """The services' output in rank order (a gang: after rank headers); ``follow``
        streams until every task ended."""
        gang = len(services) > 1
        if not follow:
            for service in services:
                if gang:
                    node = (service["Spec"].get("Labels") or {}).get("gpudock.node", "?")
                    yield f"==> rank {_rank(service)} (node {node}) <==\n".encode()
                yield from _Follower(api, service["ID"], None, follow=False).chunks()
            return
        yield from _follow_all(api, services)


class _Follower:
    """One service's log stream (``GET /services/{id}/logs``), closable from another thread."""

    def __init__(self, api: Any, service: str, path: Path | None, follow: bool = True) -> None:
        self.api, self.service, self.path, self.follow = api, service, path, follow
        self._stream: CancellableStream | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def chunks(self) -> Iterator[bytes]:
        try:
            response = self.api._get(
                self.api._url("/services/{0}/logs", self.service),
                params={"stdout": 1, "stderr": 1, "follow": int(self.follow)},
                stream=True,
            )
            self.api._raise_for_status(response)
            # closable from another thread (it shuts the socket down under a blocked read)
            self._stream = CancellableStream(
                self.api._multiplexed_response_stream_helper(response), response
            )
            if self._closed:
                self._stream.close()
            yield from self._stream
        except docker.errors.NotFound:
            return
        except (docker.errors.DockerException, OSError, ValueError, AttributeError):
            return  # closed, or the connection dropped

    def start(self) -> None:
        assert self.path is not None
        path = self.path

        def copy() -> None:
            with path.open("wb") as out:
                written = 0
                for chunk in self.chunks():
                    out.write(chunk)
                    written += len(chunk)
                    if written > 2 * CAPTURE_MAX_BYTES:
                        out.flush()
                        written = _keep_tail(path, out)

        self._thread = threading.Thread(target=copy, name="gpudock-stop-logs", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        if self._stream is not None:
            with contextlib.suppress(Exception):
                self._stream.close()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _follow_all(api: Any, services: list[dict[str, Any]]) -> Iterator[bytes]:
    """Every service's log, followed, chunks as they come; ends when all tasks ended."""
    chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=256)
    followers = [_Follower(api, s["ID"], None) for s in services]

    def pump(follower: _Follower) -> None:
        try:
            for chunk in follower.chunks():
                chunks.put(chunk)
        finally:
            chunks.put(None)

    def watch() -> None:  # a follow stream of Swarm does not end with its task: end it
        while not all(_ended(api, s["ID"]) for s in services):
            time.sleep(1.0)
        time.sleep(TAIL_SECONDS)
        for follower in followers:
            follower.close()

    threads = [threading.Thread(target=pump, args=(f,), daemon=True) for f in followers]
    threads.append(threading.Thread(target=watch, daemon=True))
    for thread in threads:
        thread.start()
    open_streams = len(followers)
    try:
        while open_streams:
            chunk = chunks.get()
            if chunk is None:
                open_streams -= 1
            else:
                yield chunk
    finally:
        for follower in followers:
            follower.close()


def _ended(api: Any, service: str) -> bool:
    try:
        task = latest_task(_service_tasks(api, service))
    except (docker.errors.DockerException, OSError):
        return False
    return task is None or (task.get("Status") or {}).get("State") not in LIVE


def _service_tasks(api: Any, service: str) -> list[dict[str, Any]]:
    """The service's tasks; none once the service is gone."""
    try:
        return list(api.tasks(filters={"service": service}))
    except docker.errors.NotFound:
        return []


def zero_completions(api: Any, service: str) -> None:
    """Change the job's spec to zero completions: Swarm stops and removes its task."""
    try:
        current = api.inspect_service(service)
    except docker.errors.NotFound:
        return
    spec = dict(current["Spec"])
    spec["Mode"] = {"ReplicatedJob": {"MaxConcurrent": 0, "TotalCompletions": 0}}
    response = api._post_json(
        api._url("/services/{0}/update", service),
        params={"version": current["Version"]["Index"]},
        data=spec,
    )
    api._raise_for_status(response)


def _gone(name: str, labels: dict[str, str]) -> ContainerStatus:
    return gang_status(name, [(0, str(labels.get("gpudock.node", "")), None)], labels)


def _rank(service: dict[str, Any]) -> int:
    return int((service["Spec"].get("Labels") or {}).get(LABEL_RANK, 0))


def _chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as handle:
        while chunk := handle.read(65536):
            yield chunk


def _keep_tail(path: Path, out: Any) -> int:
    """Cut ``path`` (open for writing as ``out``) to its last ``CAPTURE_MAX_BYTES``."""
    with path.open("rb") as src:
        src.seek(-CAPTURE_MAX_BYTES, 2)
        tail = src.read()
    out.seek(0)
    out.truncate()
    out.write(b"[gpudock] log cut: only the last part of a long output is kept\n" + tail)
    return len(tail)


__all__ = ["ContainerState", "StopCapture"]
