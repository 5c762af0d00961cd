"""a job preempts by priority only through a preempting class: can_preempt defaults to false

Jobs still waiting or running that were submitted without a priority class
lose the right to priority-preempt (they had it by default before); jobs
with a class keep what their class gave them.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

ENDED = ("SUCCEEDED", "FAILED", "CANCELLED", "LOST")


def _set_default(value: bool) -> None:
    """The column's server default, on PostgreSQL only.

    SQLite cannot change a default without rebuilding the table, and a rebuild
    would cascade-delete ``job_events`` (foreign keys are on); gpudock always
    writes the column explicitly (``store.jobs.insert_job``), so SQLite keeps its
    old default.
    """
    if op.get_bind().dialect.name != "sqlite":
        op.alter_column(
            "jobs",
            "can_preempt",
            existing_type=sa.Boolean(),
            server_default=sa.true() if value else sa.false(),
        )


def upgrade() -> None:
    _set_default(False)
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.Integer()),
        sa.column("state", sa.String()),
        sa.column("spec", sa.JSON()),
        sa.column("can_preempt", sa.Boolean()),
    )
    conn = op.get_bind()
    rows = conn.execute(
        sa.select(jobs.c.id, jobs.c.spec).where(
            jobs.c.can_preempt.is_(True), jobs.c.state.not_in(ENDED)
        )
    ).all()
    for job_id, spec in rows:
        data = json.loads(spec) if isinstance(spec, str) else (spec or {})
        if not data.get("priority_class"):
            conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(can_preempt=False))


def downgrade() -> None:
    _set_default(True)
