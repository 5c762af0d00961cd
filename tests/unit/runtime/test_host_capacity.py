"""What a node offers when its config does not say: the host's, within its cgroup."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pytest

from gpudock.config import ServerConfig
from gpudock.runtime.host_capacity import (
    HostCapacity,
    engine_capacity,
    is_local_engine,
    local_capacity,
    node_capacity,
)

GiB = 1024**3
MEMINFO = "MemTotal:       16384000 kB\nMemFree:         1000 kB\n"


def host(tmp_path: Path, cpu_max: str | None, memory_max: str | None) -> HostCapacity:
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir(exist_ok=True)
    if cpu_max is not None:
        (cgroup / "cpu.max").write_text(cpu_max + "\n")
    if memory_max is not None:
        (cgroup / "memory.max").write_text(memory_max + "\n")
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(MEMINFO)
    return local_capacity(cgroup, meminfo)


def cores() -> int:
    return len(os.sched_getaffinity(0))


def test_without_cgroup_limits_the_host_counts(tmp_path: Path) -> None:
    assert host(tmp_path, None, None) == HostCapacity(float(cores()), 16384000 * 1024)
    assert host(tmp_path, "max 100000", "max") == HostCapacity(float(cores()), 16384000 * 1024)


def test_cgroup_v2_limits_cap_cpus_and_memory(tmp_path: Path) -> None:
    capacity = host(tmp_path, "50000 100000", str(4 * GiB))
    assert capacity == HostCapacity(min(0.5, cores()), 4 * GiB)


def test_unreadable_cgroup_files_are_ignored(tmp_path: Path) -> None:
    capacity = host(tmp_path, "garbage", "-1")
    assert capacity == HostCapacity(float(cores()), 16384000 * 1024)


def test_the_engine_reports_its_own_host() -> None:
    assert engine_capacity({"NCPU": 64, "MemTotal": 512 * GiB}) == HostCapacity(64.0, 512 * GiB)
    with pytest.raises(ValueError, match="no NCPU/MemTotal"):
        engine_capacity({"NCPU": 0})


def test_unix_sockets_are_local_and_tcp_is_remote() -> None:
    assert is_local_engine(None, None) and is_local_engine("unix:///var/run/docker.sock", None)
    assert is_local_engine(None, "/run/docker.sock")
    assert not is_local_engine("tcp://10.0.0.5:2375", None)
    assert not is_local_engine(None, "ssh://gpu-7")


def never(*_: Any) -> dict[str, Any]:
    raise AssertionError("a local engine is never asked")


def test_config_wins_and_a_local_engine_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    config = ServerConfig.model_validate({"node": {"cpus": 96, "memory": "1TiB"}})
    assert node_capacity(config, never) == HostCapacity(96.0, 1024 * GiB)
    half = ServerConfig.model_validate({"node": {"cpus": 3}})
    assert node_capacity(half, never) == HostCapacity(3.0, local_capacity().memory)


def test_a_remote_engine_is_asked_and_a_failure_falls_back_to_this_host(
    caplog: pytest.LogCaptureFixture,
) -> None:
    remote = ServerConfig.model_validate({"executor": {"docker_url": "tcp://10.0.0.5:2375"}})
    info = {"NCPU": 128, "MemTotal": 2048 * GiB}
    assert node_capacity(remote, lambda: info) == HostCapacity(128.0, 2048 * GiB)

    def unreachable() -> dict[str, Any]:
        raise ConnectionError("connection refused")

    with caplog.at_level(logging.WARNING, logger="gpudock.server"):
        assert node_capacity(remote, unreachable) == local_capacity()
    assert "connection refused" in caplog.text
