"""GPU sharing, MIG and health: the share reserve, health reasons, MIG devices, sharing mode

Revision ID: 0012
Revises: 0011

ADD COLUMNs only on existing tables (SQLite adds them in place, so the CHECK
constraints of ``gpus`` stay), plus one new table:

* ``gpus.memory_reserved``: bytes of the GPU that shares never take
  (``node.gpu_memory_reserve``, written when the server starts; 0 until then);
  ``gpus.health_reason``: why a GPU is not ``ok`` (the XID that quarantined it,
  the admin who cordoned it); ``gpus.brand`` and ``gpus.arch``: the toolkit's
  brand name and the compute capability, for ``NVIDIA_REQUIRE_*``;
* ``nodes.gpu_sharing``: ``exclusive``, ``mps`` or ``time-slice``;
* ``jobs.gpu_layers``: the memory-isolation layers the job's attempt started
  with (``mps``, ``watchdog``, ``hints``);
* ``mig_devices``: the MIG devices discovery found, each a slice of one GPU;
  ``job_id`` and ``version`` are there for placing MIG jobs.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "gpus", sa.Column("memory_reserved", sa.BigInteger(), nullable=False, server_default="0")
    )
    op.add_column("gpus", sa.Column("health_reason", sa.Text(), nullable=True))
    op.add_column("gpus", sa.Column("brand", sa.String(32), nullable=True))
    op.add_column("gpus", sa.Column("arch", sa.String(16), nullable=True))
    op.add_column("nodes", sa.Column("gpu_sharing", sa.String(16), nullable=True))
    op.add_column("jobs", sa.Column("gpu_layers", sa.JSON(none_as_null=True), nullable=True))
    op.create_table(
        "mig_devices",
        sa.Column("uuid", sa.String(96), primary_key=True),
        sa.Column("node", sa.String(128), sa.ForeignKey("nodes.name"), nullable=False),
        sa.Column("parent_uuid", sa.String(96), sa.ForeignKey("gpus.uuid"), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("profile", sa.String(32), nullable=False),
        sa.Column("memory_total", sa.BigInteger(), nullable=False),
        sa.Column("gpu_instance", sa.Integer(), nullable=True),
        sa.Column("compute_instance", sa.Integer(), nullable=True),
        sa.Column("health", sa.String(16), nullable=False, server_default="ok"),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("version", sa.Integer(), nullable=False, server_default="0"),
    )
    op.create_index("ix_mig_devices_node", "mig_devices", ["node"])
    op.create_index("ix_mig_devices_parent_uuid", "mig_devices", ["parent_uuid"])


def downgrade() -> None:
    """Plain ``DROP COLUMN`` (SQLite >= 3.35): a batch rebuild would cascade."""
    op.drop_index("ix_mig_devices_parent_uuid", table_name="mig_devices")
    op.drop_index("ix_mig_devices_node", table_name="mig_devices")
    op.drop_table("mig_devices")
    op.drop_column("jobs", "gpu_layers")
    op.drop_column("nodes", "gpu_sharing")
    for column in ("arch", "brand", "health_reason", "memory_reserved"):
        op.drop_column("gpus", column)
