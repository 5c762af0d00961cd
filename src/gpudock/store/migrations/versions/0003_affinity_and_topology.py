"""affinity and topology: job selectors, tolerations, topology; node taints, cpus; GPU NUMA, NVLink

Revision ID: 0003
Revises: 0002

Only ADD COLUMNs: SQLite adds them in place (no table rebuild, so the CHECK
constraints of ``gpus`` stay as they are), and existing rows get the server
defaults (empty selector, tolerations and taints; unknown topology). Jobs not
yet finished whose stored spec already holds the new fields (a downgrade and
upgrade again) get them copied into the new columns.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# Plain strings, not sa.text(): Alembic rebuilds a SQLite table for a default that
# is a SQL expression, and a rebuild of ``nodes`` trips the foreign keys of ``gpus``.
_EMPTY_MAP = "{}"
_EMPTY_LIST = "[]"


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("node_selector", sa.JSON(), nullable=False, server_default=_EMPTY_MAP)
        )
        batch_op.add_column(
            sa.Column("tolerations", sa.JSON(), nullable=False, server_default=_EMPTY_LIST)
        )
        batch_op.add_column(sa.Column("topology", sa.String(length=16), nullable=True))
    with op.batch_alter_table("nodes", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("taints", sa.JSON(), nullable=False, server_default=_EMPTY_LIST)
        )
        batch_op.add_column(sa.Column("cpus", sa.Float(), nullable=True))
    with op.batch_alter_table("gpus", schema=None) as batch_op:
        batch_op.add_column(sa.Column("numa", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("nvlink", sa.Integer(), nullable=True))
    _copy_constraints_from_specs()


_FIELDS = ("node_selector", "tolerations", "topology")
_UNFINISHED = ("PENDING", "ALLOCATED", "STARTING", "RUNNING")


def _copy_constraints_from_specs() -> None:
    """Fill the new job columns from each unfinished job's spec JSON, where it has them."""
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.Integer()),
        sa.column("state", sa.String()),
        sa.column("spec", sa.JSON()),
        sa.column("node_selector", sa.JSON()),
        sa.column("tolerations", sa.JSON()),
        sa.column("topology", sa.String()),
    )
    conn = op.get_bind()
    rows = conn.execute(sa.select(jobs.c.id, jobs.c.spec).where(jobs.c.state.in_(_UNFINISHED)))
    for job_id, spec in rows.all():
        values = {k: spec[k] for k in _FIELDS if isinstance(spec, dict) and spec.get(k)}
        if values:
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(**values))


def downgrade() -> None:
    """Native ``DROP COLUMN`` everywhere (SQLite >= 3.35): a batch rebuild of ``jobs``
    on SQLite would cascade-delete its events and allocations."""
    for table, columns in (
        ("gpus", ("nvlink", "numa")),
        ("nodes", ("cpus", "taints")),
        ("jobs", ("topology", "tolerations", "node_selector")),
    ):
        for column in columns:
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
