"""A job's image requirements: ``jobs.cuda_require``

Revision ID: 0015
Revises: 0014

ADD COLUMN only: ``jobs.cuda_require``, the ``NVIDIA_REQUIRE_*`` of the job's image
(and env) in canonical text (``ImageRequirements.text``), learnt when the image was
inspected at submit; NULL when unknown or when it requires nothing. The scheduler's
``cuda_compat`` filter reads it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("cuda_require", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "cuda_require")
