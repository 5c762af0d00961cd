"""Containerd shims the engine forgot: found on this host, and reaped when they are ours.

What Docker leaves (measured on Docker 20.10.24 with the containerd 1.6.20 it
starts, with ``tests/kit/own_dockerd.py``, with and without gpudock): when
dockerd is killed (``-9``) while containers start or run, each of those
containers' ``containerd-shim-runc-v2`` outlives it. The restarted engine no
longer knows the task, ``docker rm -f`` removes the container but not its
shim, and neither a clean stop nor another restart ends it. Its only child,
if any, is a ``runc init`` blocked before the container's command.

A shim is reaped (``SIGKILL`` to its ``runc init`` children, then to it) only
when every one of these holds:

* it is a ``containerd-shim-runc-v2`` of Docker's namespace (``moby``),
  visible in this process's PID namespace;
* its bundle's ``config.json`` gives the container ``GPUDOCK_INSTANCE=<this
  gpudock instance>`` (every container gpudock makes carries it);
* the engine answers and knows no container with the shim's id;
* its children are ``runc init`` or none: nothing of the job runs there.

A forgotten shim of ours that runs anything else is logged (once) and left
alone: what runs there is not gpudock's to judge by a process list.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("gpudock.executors.docker")

SHIM = "containerd-shim-runc-v2"
RUNC_INIT = ["runc", "init"]


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    argv: list[str] = field(default_factory=list)


def processes(proc: Path = Path("/proc")) -> list[Process]:
    """Every process visible here (pid, parent, argv); those that vanish are skipped."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        found.append(
            Process(int(entry.name), ppid, [a.decode(errors="replace") for a in argv if a])
        )
    return found


def shim_container(process: Process) -> str | None:
    """The container id a ``moby`` runc shim serves, or None for any other process."""
    argv = process.argv
    if not argv or not argv[0].endswith(SHIM) or "-id" not in argv[:-1]:
        return None
    if "-namespace" in argv[:-1] and argv[argv.index("-namespace") + 1] != "moby":
        return None
    return argv[argv.index("-id") + 1]


def bundle_instance(pid: int, proc: Path = Path("/proc")) -> str | None:
    """``GPUDOCK_INSTANCE`` in the shim's bundle (its working directory), or None."""
    try:
        config = json.loads((proc / str(pid) / "cwd" / "config.json").read_text())
        env = config["process"]["env"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for item in env if isinstance(env, list) else []:
        if isinstance(item, str) and item.startswith("GPUDOCK_INSTANCE="):
            return item.split("=", 1)[1]
    return None


@dataclass
class ShimReaper:
    """Reaps this instance's forgotten shims (see the module docstring); thread-safe enough
    for one caller at a time (the reconciler)."""

    instance_id: str
    proc: Path = Path("/proc")
    kill: Callable[[int, int], None] = os.kill
    warned: set[int] = field(default_factory=set)

    def reap(self, engine_knows: Callable[[str], bool]) -> int:
        """Kill the forgotten shims of this instance that run nothing; how many.

        ``engine_knows(container_id)`` asks the engine; whatever it raises
        (the engine is down) ends the pass before anything is killed.
        """
        everything = processes(self.proc)
        reaped = 0
        for shim in everything:
            container = shim_container(shim)
            if container is None or bundle_instance(shim.pid, self.proc) != self.instance_id:
                continue
            if engine_knows(container):
                continue
            kids = [p for p in everything if p.ppid == shim.pid]
            if any(k.argv != RUNC_INIT for k in kids):
                if shim.pid not in self.warned:
                    self.warned.add(shim.pid)
                    log.warning(
                        "containerd shim %d of container %s, which Docker no longer knows, runs "
                        "processes %s; left alone (kill them by hand if they are stale)",
                        shim.pid, container[:12], [k.pid for k in kids],
                    )  # fmt: skip
                continue
            for pid in [*(k.pid for k in kids), shim.pid]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    self.kill(pid, signal.SIGKILL)
            reaped += 1
            log.info(
                "reaped the containerd shim of container %s that Docker forgot (pid %d; "
                "nothing of the job ran under it any more)",
                container[:12],
                shim.pid,
            )
        return reaped
