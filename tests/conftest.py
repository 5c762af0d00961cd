"""Shared fixtures: real databases (SQLite and PostgreSQL) for every store test.

``db_url`` is parametrised over both backends, so every test that uses it
runs twice. PostgreSQL comes from ``GPUDOCK_TEST_PG_URL`` (``.ci/run`` and
``scripts/test.sh`` start one); each test gets a fresh database. Under
``CI=true`` a missing PostgreSQL fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PG_URL = os.environ.get(
    "GPUDOCK_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:55432/postgres"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    """``tests/chaos``: ``--seed`` and ``--duration`` (seconds of faults; CI: 120)."""
    group = parser.getgroup("chaos")
    group.addoption("--seed", type=int, default=1, help="the chaos run's random seed")
    group.addoption(
        "--duration", type=float, default=120.0, help="seconds of faults while jobs flow"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests on the session's swarm run last, together (the chaos run after the others),
    so its daemons, server and agents never idle beside the rest of the suite."""
    on_swarm = [item for item in items if "swarm" in getattr(item, "fixturenames", ())]
    if not on_swarm:
        return
    chosen = set(on_swarm)
    on_swarm.sort(key=lambda item: "tests/chaos/" in item.nodeid)  # stable: chaos last
    items[:] = [item for item in items if item not in chosen] + on_swarm
    budget = float(config.getoption("--duration")) + 600  # the faults, then the wind-down
    for item in on_swarm:
        if "tests/chaos/" in item.nodeid:
            item.add_marker(pytest.mark.timeout(budget))


def require(component: str, why: str) -> None:
    """Fail under CI=true, skip elsewhere: a missing real component."""
    message = f"{component} is not available: {why}"
    if os.environ.get("CI") == "true":
        pytest.fail(message + " (CI=true: tests that need it must not skip)")
    pytest.skip(message)


def _pg_admin_conninfo() -> str:
    return PG_URL.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpudock.db'}"
        return
    import psycopg

    name = f"gpudock_test_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(_pg_admin_conninfo(), autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        require("PostgreSQL", f"{PG_URL}: {exc}")
    base = PG_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    with psycopg.connect(_pg_admin_conninfo(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def chromium() -> Iterator[Any]:
    """One headless Debian Chromium (a Playwright ``Browser``) for the whole session.

    Session-wide on purpose: Playwright's sync API refuses a second instance
    while one is open, so every browser test shares this one.
    """
    from tests.kit.browser import launch_chromium

    with launch_chromium() as browser:
        yield browser


@pytest.fixture(scope="session")
def swarm() -> Iterator[Any]:
    """A real 3-node Docker Swarm of private dockerds (``tests/kit/swarm.py``), once per session.

    Tests that inject faults undo them (``SwarmCluster.restore``).
    """
    from tests.kit.swarm import SwarmCluster

    with SwarmCluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def swarm_cluster(swarm: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``gpudock server --backend swarm`` on the session's swarm, on its own PostgreSQL
    database, with an agent on every node (``tests/kit/swarm_server.py``). Shared by every
    Swarm test: each leaves it as it found it (``SwarmServer.heal``)."""
    from tests.kit.pg import fresh_database
    from tests.kit.swarm_server import swarm_server

    home = tmp_path_factory.mktemp("swarm-server")
    with fresh_database() as db, swarm_server(swarm, home, db) as cs:
        cs.heal()
        yield cs
