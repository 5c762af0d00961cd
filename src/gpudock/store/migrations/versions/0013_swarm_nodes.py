"""swarm nodes: engine identity, availability, loss, agents, fencing; gang parts; node tokens

Revision ID: 0013
Revises: 0012

Nullable columns only (no rebuild):

* ``nodes.engine_id``: the Swarm node ID (NULL on the docker backend);
  ``nodes.availability``: Swarm's ``active``, ``pause`` or ``drain``;
  ``nodes.engine_state``: Swarm's ``ready``, ``down``, ``unknown`` or
  ``disconnected``; ``nodes.down_since``: when it stopped being ready (the
  node-loss grace runs from here);
* ``nodes.agent_seen_at``: the node agent's last report; ``nodes.fence_nonce``
  and ``nodes.fence_nonce_at``: the nonce a returning node's agent must echo
  in a report that shows no stale container; ``nodes.fenced_at``: when that
  happened last;
* ``jobs.gang``: a multi-node gang's parts in rank order, ``[[node, [uuid...]]...]``;
* ``tokens.node``: a node token acts only for this node's agent.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

_NODE_COLUMNS = (
    sa.Column("engine_id", sa.String(64), nullable=True),
    sa.Column("availability", sa.String(16), nullable=True),
    sa.Column("engine_state", sa.String(16), nullable=True),
    sa.Column("down_since", sa.Float(), nullable=True),
    sa.Column("agent_seen_at", sa.Float(), nullable=True),
    sa.Column("fence_nonce", sa.String(64), nullable=True),
    sa.Column("fence_nonce_at", sa.Float(), nullable=True),
    sa.Column("fenced_at", sa.Float(), nullable=True),
)


def upgrade() -> None:
    for column in _NODE_COLUMNS:
        op.add_column("nodes", column)
    op.add_column("jobs", sa.Column("gang", sa.JSON(), nullable=True))
    op.add_column("tokens", sa.Column("node", sa.String(128), nullable=True))


def downgrade() -> None:
    """Plain ``DROP COLUMN`` (SQLite >= 3.35), as 0011."""
    op.drop_column("tokens", "node")
    op.drop_column("jobs", "gang")
    for column in reversed(_NODE_COLUMNS):
        op.drop_column("nodes", column.name)
