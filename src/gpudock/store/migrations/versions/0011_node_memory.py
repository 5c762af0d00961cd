"""node memory: the host memory a node offers jobs, stored beside its CPU cores

Revision ID: 0011
Revises: 0010

One nullable column on ``nodes`` (no rebuild): ``memory``, bytes jobs may
request there; NULL when memory is not counted. The server writes it at start
(``node.memory``, else the engine host's), so every reader of the store (the
scheduler after a restart, estimates, queues, metrics, ``gpudock nodes``)
sees the same capacity. Existing nodes count no memory until the server
starts again.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("nodes", sa.Column("memory", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    """Plain ``DROP COLUMN`` (SQLite >= 3.35): a batch rebuild of ``nodes`` on SQLite
    would cascade-delete what references it."""
    op.drop_column("nodes", "memory")
