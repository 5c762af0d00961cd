"""job hold: who holds a PENDING job back from scheduling, and since when

Revision ID: 0007
Revises: 0006

Two nullable columns on ``jobs`` (no rebuild). Existing jobs are not held.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("held_by", sa.String(length=128)),
    ("held_at", sa.Float()),
)


def upgrade() -> None:
    for name, type_ in _COLUMNS:
        op.add_column("jobs", sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    """Native ``DROP COLUMN`` everywhere (SQLite >= 3.35): a batch rebuild of ``jobs``
    on SQLite would cascade-delete its events and allocations."""
    for name, _ in reversed(_COLUMNS):
        op.execute(f"ALTER TABLE jobs DROP COLUMN {name}")
