"""event log: the ``events`` table, filled from ``job_events``; stale reasons cleared

Revision ID: 0004
Revises: 0003

A new table only (no rebuild of an existing one). Every existing
``job_events`` row becomes a ``job.state`` event, in its original order, so
the log starts with the history the database already holds. Jobs no longer
PENDING lose their stale pending reasons, and jobs holding resources their
stale state reason (reasons are cleared on every state change from now on).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_BATCH = 1000


def upgrade() -> None:
    events = op.create_table(
        "events",
        sa.Column(  # 64-bit on PostgreSQL; SQLite's rowid alias must say INTEGER
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("type", sa.String(length=32), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("user", sa.String(length=128), nullable=True),
        sa.Column("queue", sa.String(length=64), nullable=True),
        sa.Column("node", sa.String(length=128), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_at", "events", ["at"])
    op.create_index("ix_events_type", "events", ["type"])
    op.create_index("ix_events_job_id", "events", ["job_id"])
    op.create_index("ix_events_user", "events", ["user"])
    assert events is not None
    _copy_job_events(events)
    _clear_stale_reasons()


def downgrade() -> None:
    op.drop_index("ix_events_user", table_name="events")
    op.drop_index("ix_events_job_id", table_name="events")
    op.drop_index("ix_events_type", table_name="events")
    op.drop_index("ix_events_at", table_name="events")
    op.drop_table("events")


def _copy_job_events(events: sa.Table) -> None:
    """One ``job.state`` event per ``job_events`` row, in id order."""
    history = sa.table(
        "job_events",
        sa.column("id", sa.Integer()),
        sa.column("job_id", sa.Integer()),
        sa.column("at", sa.Float()),
        sa.column("attempt", sa.Integer()),
        sa.column("from_state", sa.String()),
        sa.column("to_state", sa.String()),
        sa.column("reason", sa.Text()),
    )
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.Integer()),
        sa.column("user", sa.String()),
        sa.column("queue", sa.String()),
        sa.column("node", sa.String()),
    )
    conn = op.get_bind()
    stmt = (
        sa.select(history, jobs.c.user, jobs.c.queue)
        .join(jobs, jobs.c.id == history.c.job_id)
        .order_by(history.c.id)
    )
    batch: list[dict[str, Any]] = []
    for row in conn.execute(stmt).mappings():
        batch.append(
            {
                "at": row["at"],
                "type": "job.state",
                "job_id": row["job_id"],
                "user": row["user"],
                "queue": row["queue"],
                "node": None,
                "payload": {
                    "from": row["from_state"] or None,
                    "to": row["to_state"],
                    "reason": row["reason"],
                    "attempt": row["attempt"],
                },
            }
        )
        if len(batch) >= _BATCH:
            op.bulk_insert(events, batch)
            batch = []
    if batch:
        op.bulk_insert(events, batch)


def _clear_stale_reasons() -> None:
    jobs = sa.table(
        "jobs",
        sa.column("state", sa.String()),
        sa.column("reason", sa.Text()),
        sa.column("pending_reasons", sa.JSON()),
    )
    op.execute(jobs.update().where(jobs.c.state != "PENDING").values(pending_reasons=[]))
    active = ("ALLOCATED", "STARTING", "RUNNING")
    op.execute(jobs.update().where(jobs.c.state.in_(active)).values(reason=None))
