"""Fixtures for the dashboard and ``top`` tests: one real server (4 emulated H100s,
real dockerd) for both, one real Chromium per module; screenshots go to
``$GPUDOCK_ARTIFACTS``."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from tests.kit.browser import artifacts_dir
from tests.kit.docker import (
    cleanup_containers,
    docker_client,
    require_gpu_hook,
    require_test_image,
)
from tests.kit.server import FAST_CONFIG, ServerProcess

if TYPE_CHECKING:  # playwright is imported lazily by the kit
    from playwright.sync_api import Browser


QUEUES = {
    "queues": [
        {"name": "vision", "guarantee": {"gpus": 2}, "limit": {"gpus": 3}},
        {"name": "nlp", "weight": 2},
    ]
}
CONFIG = {**FAST_CONFIG, "scheduler": {"queues": QUEUES}}


@pytest.fixture(scope="session")
def docker() -> Any:
    client = docker_client()
    require_test_image(client)
    require_gpu_hook(client)
    return client


@pytest.fixture(scope="session")
def server(docker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A running server with 4 emulated H100s on SQLite; its containers removed after."""
    server = ServerProcess(tmp_path_factory.mktemp("ui") / "home", config=CONFIG)
    server.start(wait=False)
    server.wait_healthy(timeout=120)
    instance = httpx.get(server.url + "/healthz", timeout=5).json()["instance"]
    yield server
    server.stop()
    cleanup_containers(docker, f"gpudock.instance={instance}")


@pytest.fixture(scope="module")
def browser(chromium: Browser) -> Browser:
    """The session's one Chromium (``tests/conftest.py``: Playwright's sync API allows one)."""
    return chromium


@pytest.fixture(scope="session")
def shots() -> Path:
    """Where screenshots go: ``$GPUDOCK_ARTIFACTS/ui`` or a temporary folder."""
    return artifacts_dir(Path(tempfile.gettempdir()) / "gpudock-artifacts") / "ui"
