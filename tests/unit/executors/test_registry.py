"""The executor registry: a backend name builds its executor; server.py names none."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudock.config import ServerConfig
from gpudock.executors.base import ExecutorWithNodes
from gpudock.executors.docker import DockerExecutor
from gpudock.executors.registry import EXECUTORS, backend_names, create_executor
from gpudock.executors.swarm import SwarmExecutor

SERVER = Path(__file__).resolve().parents[3] / "src" / "gpudock" / "server.py"


def test_each_backend_is_one_registry_line_and_builds_without_touching_an_engine(
    tmp_path: Path,
) -> None:
    assert backend_names() == ["docker", "swarm"]
    docker = create_executor(ServerConfig(), "inst", tmp_path)
    swarm = create_executor(ServerConfig(backend="swarm"), "inst", tmp_path)
    assert isinstance(docker, DockerExecutor) and not isinstance(docker, ExecutorWithNodes)
    assert isinstance(swarm, SwarmExecutor) and isinstance(swarm, ExecutorWithNodes)
    assert not swarm.binds_mounts and docker.binds_mounts


def test_an_unknown_backend_is_refused_with_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown backend 'k8s'; known: docker, swarm"):
        create_executor(ServerConfig(backend="k8s"), "inst", tmp_path)


def test_the_server_names_no_concrete_executor() -> None:
    text = SERVER.read_text()
    for target in EXECUTORS.values():
        assert target.partition(":")[0] not in text
    assert "SwarmExecutor" not in text and "DockerExecutor" not in text
