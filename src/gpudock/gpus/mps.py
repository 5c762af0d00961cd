"""MPS (CUDA Multi-Process Service): is a control daemon running here, and what a
job's container needs to use it with limits the job cannot lift.

The control daemon (``nvidia-cuda-mps-control -d``) listens on the unix socket
``<pipe_dir>/control``; a CUDA client finds it through
``CUDA_MPS_PIPE_DIRECTORY``. Under MPS the driver itself holds each client to

* ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (``0=4096M,1=4096M``: per device, as
  the container numbers its devices) - an allocation past it fails with
  out-of-memory in the job, never in its neighbours;
* ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (the job's ``gpu_compute``).

A container reaches the daemon through the pipe directory (bind-mounted at the
same path), writes client logs to the log directory, and shares the host's
IPC namespace (MPS clients and server exchange memory handles through it).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path

from gpudock.core.inventory import GpuSharing

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class MpsSetup:
    """The host directories of a running MPS control daemon."""

    pipe_dir: str
    log_dir: str


def mps_daemon_running(pipe_dir: str, timeout: float = 0.5) -> bool:
    """True when something accepts connections on ``<pipe_dir>/control`` (the MPS
    control daemon's socket). Never raises."""
    path = Path(pipe_dir) / "control"
    if not path.is_socket():
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
    except OSError:
        return False
    return True


def resolve_sharing(declared: str, daemon_running: bool) -> GpuSharing:
    """The node's sharing mode: ``declared`` (``executor.sharing``), or for ``auto``
    MPS when its daemon answers and time-slicing otherwise."""
    if declared == "auto":
        return GpuSharing.MPS if daemon_running else GpuSharing.TIME_SLICE
    return GpuSharing(declared)


def mps_env(
    setup: MpsSetup, gpu_count: int, memory_limit: int, compute: int | None
) -> dict[str, str]:
    """The env of a shared job's container on an MPS node: the pipe and log
    directories, its memory limit on each of its ``gpu_count`` devices (whole
    MiB, rounded down, so never above the share) and its compute percentage."""
    limit = f"{memory_limit // MIB}M"
    env = {
        "CUDA_MPS_PIPE_DIRECTORY": setup.pipe_dir,
        "CUDA_MPS_LOG_DIRECTORY": setup.log_dir,
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": ",".join(f"{i}={limit}" for i in range(gpu_count)),
    }
    if compute is not None:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(compute)
    return env
