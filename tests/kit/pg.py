"""A fresh PostgreSQL database on the test server (``GPUDOCK_TEST_PG_URL``), dropped after.

For tests that start their own server processes on PostgreSQL (the Swarm
backend's). Under ``CI=true`` a missing PostgreSQL fails the test.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

from tests.kit.docker import unavailable

PG_URL = os.environ.get(
    "GPUDOCK_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:55432/postgres"
)


@contextlib.contextmanager
def fresh_database(prefix: str = "gpudock_test") -> Iterator[str]:
    """Yield the SQLAlchemy URL of a new, empty database; drop it (forcibly) afterwards."""
    import psycopg

    admin = PG_URL.replace("postgresql+psycopg://", "postgresql://")
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(admin, autocommit=True, connect_timeout=3) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        unavailable(f"PostgreSQL is not available at {PG_URL}: {exc}")
    try:
        yield f"{PG_URL.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
