"""registry credentials: users' own logins to private registries

Revision ID: 0010
Revises: 0009

One new table, ``registry_credentials``: a user's login to one registry
(``gpudock registry login``), its password encrypted with the server's key.
At most one per user and registry.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registry_credentials",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("user", sa.String(length=128), nullable=False),
        sa.Column("registry", sa.String(length=255), nullable=False),
        sa.Column("username", sa.String(length=255), nullable=False),
        sa.Column("secret", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.UniqueConstraint("user", "registry", name="registry_credential_user"),
    )
    op.create_index(
        "ix_registry_credentials_registry", "registry_credentials", ["registry"], unique=False
    )


def downgrade() -> None:
    op.drop_index("ix_registry_credentials_registry", table_name="registry_credentials")
    op.drop_table("registry_credentials")
