"""``backend`` and ``swarm:`` in the server config."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudock.config import ServerConfig, load_config
from gpudock.core.errors import InvalidInput


def test_the_defaults_are_one_host_and_a_minute_of_grace() -> None:
    config = ServerConfig()
    assert config.backend == "docker"
    assert (config.swarm.node_grace, config.swarm.agent_interval) == (60.0, 5.0)
    assert (config.swarm.start_timeout, config.swarm.keep_exited) == (300.0, 600.0)


def test_durations_read_as_everywhere(tmp_path: Path) -> None:
    path = tmp_path / "server.yaml"
    path.write_text("backend: swarm\nswarm: {node_grace: 2m, agent_interval: 10s}\n")
    config = load_config(path)
    assert config.backend == "swarm" and config.swarm.node_grace == 120.0


def test_a_grace_too_short_for_the_agents_lease_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "server.yaml"
    path.write_text("swarm: {node_grace: 10s, agent_interval: 5s}\n")
    with pytest.raises(
        InvalidInput,
        match=r"node_grace \(10s\) must be at least 4 x "
        r"agent_interval \(20s\)",
    ):
        load_config(path)
