"""preemption cost: a job's declared restart cost and checkpoint interval

Revision ID: 0014
Revises: 0013

Two nullable columns on ``jobs`` (no rebuild), denormalised from the spec like
``min_runtime`` so that the scheduler's snapshot reads them with the running
jobs: ``restart_cost``, seconds a restart costs the job, and
``checkpoint_interval``, seconds between its checkpoints
(``gpudock.scheduler.preemption_rules``). NULL: not declared; the cluster's
``scheduler.preemption.restart_cost`` and the job's measured start time apply.
Existing jobs declare neither.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("restart_cost", sa.Float(), nullable=True))
    op.add_column("jobs", sa.Column("checkpoint_interval", sa.Float(), nullable=True))


def downgrade() -> None:
    """Plain ``DROP COLUMN`` (SQLite >= 3.35): a batch rebuild of ``jobs`` on SQLite would
    cascade-delete its events and allocations."""
    op.drop_column("jobs", "checkpoint_interval")
    op.drop_column("jobs", "restart_cost")
