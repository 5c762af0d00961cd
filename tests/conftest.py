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
