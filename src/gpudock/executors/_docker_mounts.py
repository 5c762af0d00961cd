"""The Docker executor's bind sources: staged where this host can, resolved where it cannot.

::

    bind(request)                     around create + start of one container
      no mounts ──────────────────► Binding(sources=None)       nothing to bind
      problem() is None ──────────► stage every mount (``mount_staging``); Docker binds
      │                               the staged paths; unstaged when the block ends
      ▼
      Binding(sources=None, unsafe=problem): the executor resolves each path and binds
      it as it resolved (``docker_mounts``), refusing folders jobs can write

``problem()`` is why staging is off, or None: an engine that is not on this
host, a host where mounts cannot be bound (``MountStager.problem``), or an
engine in another mount namespace. The namespace is asked of the engine's
socket the first time it answers, and remembered.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpudock.config import ExecutorConfig
from gpudock.core.mounts import MountRefused
from gpudock.executors.base import ExecutorUnavailable, LaunchError, LaunchRequest
from gpudock.executors.mount_staging import MountStager, engine_namespace_problem

DEFAULT_SOCKET = "/var/run/docker.sock"


@dataclass(frozen=True, slots=True)
class Binding:
    """What Docker binds for one launch: ``sources[i]`` for mount ``i`` (staged), or None:
    resolve each mount here, refusing folders jobs can write when ``unsafe`` says why."""

    sources: tuple[str, ...] | None = None
    unsafe: str | None = None


class BindSources:
    def __init__(self, config: ExecutorConfig, stager: MountStager) -> None:
        self.config = config
        self.stager = stager
        self._namespace: str | None = None
        self._namespace_known = False
        self._lock = threading.Lock()

    def socket_path(self) -> str | None:
        """The engine's unix socket, or None when the engine is reached over the network."""
        url = self.config.docker_url or os.environ.get("DOCKER_HOST") or "unix://"
        if url.startswith("/"):
            return url
        if url.startswith(("unix://", "http+unix://")):
            return url.split("://", 1)[1] or DEFAULT_SOCKET
        return None

    def problem(self, *, at_launch: bool = False) -> str | None:
        """Why mounts are not staged (one line), or None when they are.

        When the engine does not answer, its namespace is not known yet: None,
        or ``ExecutorUnavailable`` ``at_launch``.
        """
        socket = self.socket_path()
        if socket is None:
            return "the engine is not on this host (executor.docker_url is not a unix socket)"
        problem = self.stager.problem()
        if problem is not None:
            return problem
        with self._lock:
            if not self._namespace_known:
                try:
                    self._namespace = engine_namespace_problem(socket)
                except OSError as exc:
                    if at_launch:
                        raise ExecutorUnavailable(
                            f"Docker engine unreachable at {socket}: {exc.strerror or exc}"
                        ) from exc
                    return None
                self._namespace_known = True
            return self._namespace

    def is_staged(self, source: str) -> bool:
        """Whether ``source`` (a bind source Docker holds) is a staging path."""
        return source.startswith(str(self.stager.root) + "/")

    @contextmanager
    def bind(self, request: LaunchRequest) -> Iterator[Binding]:
        """Sources for ``request``'s mounts, staged for the block's length when possible.

        Raises ``LaunchError`` (nothing left staged) when a mount may not or
        cannot be bound, naming it and why.
        """
        if not request.mounts:
            yield Binding()
            return
        problem = self.problem(at_launch=True)
        if problem is not None:
            yield Binding(unsafe=problem)
            return
        try:
            staged = self.stager.stage(request.name, request.mounts, self.config.allowed_mounts)
        except MountRefused as exc:
            raise LaunchError(str(exc)) from None
        try:
            yield Binding(sources=staged.sources)
        finally:
            self.stager.release(staged)

    def sweep(self) -> int:
        """Remove staging left by a crashed server; 0 when this host does not stage."""
        if self.socket_path() is None or self.stager.problem() is not None:
            return 0
        return self.stager.sweep()


def staging_root(config: ExecutorConfig, home: Path | None) -> Path:
    """``executor.mount_staging_dir``, else ``<home>/mounts``, else ``$GPUDOCK_HOME/mounts``."""
    if config.mount_staging_dir:
        return Path(config.mount_staging_dir)
    if home is None:
        from gpudock.home import default_home

        home = default_home()
    return home / "mounts"
