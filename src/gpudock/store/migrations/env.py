"""Alembic environment: runs on the connection that ``Database.migrate`` passes."""

from __future__ import annotations

from alembic import context

from gpudock.store.models import Base

config = context.config
connection = config.attributes.get("connection")
if connection is None:  # pragma: no cover - only via `alembic` CLI with a URL
    from sqlalchemy import create_engine

    connection = create_engine(config.get_main_option("sqlalchemy.url") or "").connect()

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
