"""admin config: the scheduling config applied live (``gpudock admin apply``)

Revision ID: 0009
Revises: 0008

One new table, ``cluster_configs``: each applied scheduling config (priority
classes, queues, node labels and taints) with when, by whom and how (api or
sighup). The newest row is the config in force; an empty table means the
server config file's.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cluster_configs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("applied_at", sa.Float(), nullable=False),
        sa.Column("applied_by", sa.String(length=128), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("document", sa.JSON(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("cluster_configs")
