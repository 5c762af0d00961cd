"""The CPU cores and memory a node offers jobs when its config does not say.

A local engine (a unix socket) runs containers on this host: its capacity is
the host's, bounded by this process's cgroup v2 limits when the server runs in
a container (``cpu.max``, ``memory.max``). A remote engine (tcp, ssh) reports
its own host through ``docker info`` (``NCPU``, ``MemTotal``). ``node.cpus``
and ``node.memory`` in the server config override either.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpudock.config import ServerConfig

log = logging.getLogger("gpudock.server")

CGROUP_DIR = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True, slots=True)
class HostCapacity:
    """CPU cores and memory bytes jobs may request on a node."""

    cpus: float
    memory: int


def local_capacity(cgroup_dir: Path = CGROUP_DIR, meminfo: Path = MEMINFO) -> HostCapacity:
    """This host's usable CPUs (affinity mask) and ``MemTotal``, each capped by the cgroup v2
    limit in ``cgroup_dir`` when one is set. Never raises: unreadable files are ignored."""
    cpus = float(_cpu_count())
    quota = _cgroup_cpus(cgroup_dir / "cpu.max")
    if quota is not None:
        cpus = min(cpus, quota)
    memory = _mem_total(meminfo)
    limit = _cgroup_bytes(cgroup_dir / "memory.max")
    if limit is not None:
        memory = limit if memory is None else min(memory, limit)
    return HostCapacity(cpus, memory if memory is not None else 0)


def engine_capacity(info: Mapping[str, Any]) -> HostCapacity:
    """The engine host's capacity from ``docker info``; ``ValueError`` if it lacks it."""
    cpus, memory = info.get("NCPU"), info.get("MemTotal")
    if not isinstance(cpus, int) or not isinstance(memory, int) or cpus <= 0 or memory <= 0:
        raise ValueError(f"docker info has no NCPU/MemTotal (got {cpus!r}, {memory!r})")
    return HostCapacity(float(cpus), memory)


def is_local_engine(docker_url: str | None, docker_host: str | None) -> bool:
    """True when the engine (``docker_url``, else ``DOCKER_HOST``, else the default
    socket) listens on a unix socket of this host."""
    url = docker_url or docker_host or "unix://"
    return url.startswith(("unix://", "/"))


def node_capacity(
    config: ServerConfig, engine_info: Callable[[], Mapping[str, Any]]
) -> HostCapacity:
    """What this server's node offers: ``node.cpus``/``node.memory`` where set, else its
    engine's host (``local_capacity`` for a local engine, ``engine_info()`` for a remote
    one; if that fails, a WARNING and this host's). Never raises."""
    node = config.node
    if node.cpus is not None and node.memory is not None:
        return HostCapacity(node.cpus, node.memory)
    host: HostCapacity | None = None
    if not is_local_engine(config.executor.docker_url, os.environ.get("DOCKER_HOST")):
        try:
            host = engine_capacity(engine_info())
        except Exception as exc:  # any engine failure: fall back, loudly
            log.warning("cannot read the engine's CPUs and memory (%s); using this host's", exc)
    host = host or local_capacity()
    return HostCapacity(
        node.cpus if node.cpus is not None else host.cpus,
        node.memory if node.memory is not None else host.memory,
    )


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _cgroup_cpus(path: Path) -> float | None:
    """``cpu.max`` (``QUOTA PERIOD`` or ``max PERIOD``) as cores; None when unlimited."""
    parts = (_read(path) or "").split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def _cgroup_bytes(path: Path) -> int | None:
    """``memory.max`` in bytes; None when unlimited or unreadable."""
    text = (_read(path) or "").strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def _mem_total(meminfo: Path) -> int | None:
    for line in (_read(meminfo) or "").splitlines():
        if line.startswith("MemTotal:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                return int(fields[1]) * (1024 if fields[-1] == "kB" else 1)
    return None
