"""token lifecycle: a name, an expiry, the last use and who created each token

Revision ID: 0006
Revises: 0005

Four nullable columns on ``tokens`` (no rebuild). Existing tokens keep
working: no name, no expiry (they never expire), never used, creator
unknown. Revocation already had its column (``revoked_at``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("name", sa.String(length=64)),
    ("expires_at", sa.Float()),
    ("last_used_at", sa.Float()),
    ("created_by", sa.String(length=128)),
)


def upgrade() -> None:
    for name, type_ in _COLUMNS:
        op.add_column("tokens", sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tokens") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
