"""dependencies and job arrays: after / after_ok ids, array id, index and limit

Revision ID: 0008
Revises: 0007

Five nullable columns on ``jobs`` and an index on ``array_id``, added with
plain ``ADD COLUMN`` (no table rebuild, so no ``ON DELETE CASCADE`` row of
``job_events`` or ``allocations`` is touched). Existing jobs have no
dependency and belong to no array.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("after", sa.JSON(none_as_null=True)),
    ("after_ok", sa.JSON(none_as_null=True)),
    ("array_id", sa.Integer()),
    ("array_index", sa.Integer()),
    ("array_limit", sa.Integer()),
)


def upgrade() -> None:
    for name, type_ in _COLUMNS:
        op.add_column("jobs", sa.Column(name, type_, nullable=True))
    op.create_index("ix_jobs_array_id", "jobs", ["array_id"])


def downgrade() -> None:
    op.drop_index("ix_jobs_array_id", table_name="jobs")
    for name, _ in reversed(_COLUMNS):
        op.drop_column("jobs", name)  # SQLite >= 3.35 drops a column without a rebuild
