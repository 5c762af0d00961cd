"""Which container a host process runs in: PID → ``/proc/<pid>/cgroup`` → container id.

NVML lists GPU processes by host PID. A container's processes sit in a
cgroup named after the container's 64-hex id, whatever the engine's cgroup
driver and parent:

* cgroupfs (v1 or v2): ``/docker/<id>``, or ``/<cgroup-parent>/<id>``;
* systemd: ``/system.slice/docker-<id>.scope``;
* a nested cgroup inside the container: ``/docker/<id>/init.scope``.

So the id is the last path component that is 64 hex digits, alone or as
``docker-<id>.scope`` (or ``cri-containerd-<id>.scope``). A process in no such
cgroup (a host process, or one whose ``/proc`` entry this process cannot see)
has no container.

``ContainerOfPid`` caches each answer under the process's start time, so a
PID the kernel reuses is looked up again, and forgets processes that left.
A PID with no ``/proc`` entry (it ended after NVML listed it, or this
process's PID namespace does not hold it) is ``GONE``: it can be attributed
to nothing, so the watchdog counts it for no one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

PROC = Path("/proc")
GONE = "-"
"""``ContainerOfPid.lookup``'s answer for a PID without a ``/proc`` entry."""
_ID_RE = re.compile(r"^(?:[a-z-]+-)?([0-9a-f]{64})(?:\.scope)?$")


def container_id_from_cgroup(text: str) -> str | None:
    """The container id in the contents of a ``/proc/<pid>/cgroup`` file, or None."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        for part in reversed(path.split("/")):
            match = _ID_RE.match(part)
            if match is not None:
                return match[1]
    return None


def start_time(pid: int, proc: Path = PROC) -> int | None:
    """The process's start time in clock ticks (``/proc/<pid>/stat`` field 22), or None
    when it is gone or cannot be read."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # the name may hold spaces
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


class ContainerOfPid:
    """``lookup(pid)``: the container id of a host process, cached per process."""

    def __init__(self, proc: Path = PROC) -> None:
        self.proc = proc
        self._cache: dict[int, tuple[int, str | None]] = {}

    def lookup(self, pid: int) -> str | None:
        """The container id of ``pid``, None when it runs in no container, or ``GONE``."""
        started = start_time(pid, self.proc)
        if started is None:
            self._cache.pop(pid, None)
            return GONE
        known = self._cache.get(pid)
        if known is not None and known[0] == started:
            return known[1]
        try:
            text = (self.proc / str(pid) / "cgroup").read_text()
        except OSError:
            return None
        found = container_id_from_cgroup(text)
        self._cache[pid] = (started, found)
        return found

    def forget_all_but(self, pids: Iterable[int]) -> None:
        """Drop what is cached for processes not in ``pids`` (they left the GPUs)."""
        keep = set(pids)
        for pid in [p for p in self._cache if p not in keep]:
            del self._cache[pid]
