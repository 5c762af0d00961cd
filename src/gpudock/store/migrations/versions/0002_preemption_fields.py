"""scheduling fields: gang nodes, cpus, runtimes, preemption, failures, preemptor, container name

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("nodes", sa.Integer(), nullable=False, server_default="1"))
        batch_op.add_column(sa.Column("cpus", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("max_runtime", sa.Float(), nullable=True))
        batch_op.add_column(sa.Column("min_runtime", sa.Float(), nullable=True))
        batch_op.add_column(
            sa.Column("preemptible", sa.Boolean(), nullable=False, server_default=sa.true())
        )
        batch_op.add_column(
            sa.Column("can_preempt", sa.Boolean(), nullable=False, server_default=sa.true())
        )
        batch_op.add_column(sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
        batch_op.add_column(sa.Column("preempted_for", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("container_name", sa.String(length=128), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        for column in (
            "container_name",
            "preempted_for",
            "failures",
            "can_preempt",
            "preemptible",
            "min_runtime",
            "max_runtime",
            "cpus",
            "nodes",
        ):
            batch_op.drop_column(column)
