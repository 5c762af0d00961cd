"""Fixtures for tests against real components (dockerd, PostgreSQL).

Run them through ``scripts/test.sh`` (it starts the components); under
``CI=true`` a missing component fails the test instead of skipping it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# ``tests.kit`` must be importable however pytest is launched (``python -m pytest``
# puts the repo root on sys.path, the ``pytest`` script does not).
_REPO_ROOT = str(Path(__file__).resolve().parents[2])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from tests.kit.docker import (  # noqa: E402
    cleanup_containers,
    docker_client,
    require_test_image,
    spare_dockerd,
    unique_instance_id,
)


@pytest.fixture(scope="session")
def docker_api() -> Iterator[Any]:
    """A docker-py client of the default engine, with the test image present."""
    client = docker_client()
    require_test_image(client)
    yield client
    client.close()


@pytest.fixture
def instance_id(docker_api: Any) -> Iterator[str]:
    """A fresh gpudock instance id; its containers are removed after the test."""
    value = unique_instance_id()
    yield value
    cleanup_containers(docker_api, f"gpudock.instance={value}")


@pytest.fixture(scope="session")
def nohook_docker_url(docker_api: Any) -> Iterator[str]:
    """URL of a second dockerd without the NVIDIA hook (a machine with no toolkit)."""
    with spare_dockerd() as url:
        yield url
