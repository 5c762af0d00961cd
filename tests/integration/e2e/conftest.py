"""Fixtures for end-to-end tests: a real server process on the real dockerd."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.kit.browser import OfflinePage, artifacts_dir
from tests.kit.docker import cleanup_containers, docker_client, require_gpu_hook, require_test_image
from tests.kit.server import ServerProcess


@pytest.fixture(scope="session")
def docker() -> Any:
    client = docker_client()
    require_test_image(client)
    require_gpu_hook(client)
    return client


@pytest.fixture
def make_server(docker: Any, tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Build (not start) servers; every one is stopped and its containers removed after."""
    servers: list[ServerProcess] = []

    def factory(**kwargs: Any) -> ServerProcess:
        server = ServerProcess(tmp_path / f"home{len(servers)}", **kwargs)
        servers.append(server)
        return server

    yield factory
    for server in servers:
        teardown(server, docker)


def teardown(server: ServerProcess, docker: Any) -> None:
    """Stop the server and remove its containers. Idempotent."""
    if getattr(server, "torn_down", False):
        return
    server.torn_down = True  # type: ignore[attr-defined]
    instance = None
    with contextlib.suppress(httpx.HTTPError, ValueError):
        instance = httpx.get(server.url + "/healthz", timeout=2).json().get("instance")
    server.stop()
    instance = instance or _instance_from_db(server)
    if instance:
        cleanup_containers(docker, f"gpudock.instance={instance}")


def _instance_from_db(server: ServerProcess) -> str | None:
    from sqlalchemy import create_engine, text

    url = server.db_url or f"sqlite:///{server.home / 'gpudock.db'}"
    try:
        engine = create_engine(url)
        with engine.connect() as conn:
            value = conn.execute(text("SELECT value FROM meta WHERE key='instance_id'")).scalar()
        engine.dispose()
    except Exception:
        return None
    return str(value) if value else None


@pytest.fixture
def server(
    make_server: Callable[..., ServerProcess], db_url: str, docker: Any
) -> Iterator[ServerProcess]:
    """A running server with 4 emulated H100s, on SQLite and on PostgreSQL."""
    server = make_server(db_url=db_url).start()
    yield server
    teardown(server, docker)  # before db_url drops the database


@pytest.fixture
def offline_page(
    chromium: Any, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[[str], OfflinePage]]:
    """Open pages that may reach only the given server origin (see ``OfflinePage``).

    Each page's last state is saved as ``<test>-<n>.png`` under ``$GPUDOCK_ARTIFACTS``
    (else the test's ``tmp_path``) when the test ends, passed or failed.
    """
    pages: list[OfflinePage] = []

    def factory(origin: str) -> OfflinePage:
        pages.append(OfflinePage(chromium, origin))
        return pages[-1]

    yield factory
    folder = artifacts_dir(tmp_path)
    for n, page in enumerate(pages):
        with contextlib.suppress(Exception):  # a crashed page must not hide the test's error
            page.screenshot(folder / f"{request.node.name}-{n}.png")
        page.close()
