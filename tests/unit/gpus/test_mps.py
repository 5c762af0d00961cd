"""Is an MPS control daemon there, and what its clients' env holds."""

from __future__ import annotations

import socket
from pathlib import Path

from gpudock.core.inventory import GpuSharing
from gpudock.gpus.mps import MpsSetup, mps_daemon_running, mps_env, resolve_sharing

MIB = 1024**2


def test_a_listening_control_socket_is_a_running_daemon(tmp_path: Path) -> None:
    assert not mps_daemon_running(str(tmp_path))  # no socket at all
    daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    daemon.bind(str(tmp_path / "control"))
    daemon.listen(1)
    try:
        assert mps_daemon_running(str(tmp_path))
    finally:
        daemon.close()
    assert not mps_daemon_running(str(tmp_path))  # a stale socket file: nobody answers


def test_auto_follows_the_daemon_and_a_declared_mode_wins() -> None:
    assert resolve_sharing("auto", True) is GpuSharing.MPS
    assert resolve_sharing("auto", False) is GpuSharing.TIME_SLICE
    assert resolve_sharing("exclusive", True) is GpuSharing.EXCLUSIVE
    assert resolve_sharing("mps", False) is GpuSharing.MPS


def test_the_env_limits_every_device_in_whole_mib_rounded_down() -> None:
    setup = MpsSetup("/tmp/nvidia-mps", "/var/log/nvidia-mps")
    assert mps_env(setup, 2, 4096 * MIB + 5, 30) == {
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
        "CUDA_MPS_LOG_DIRECTORY": "/var/log/nvidia-mps",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M,1=4096M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
    }
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in mps_env(setup, 1, MIB, None)
