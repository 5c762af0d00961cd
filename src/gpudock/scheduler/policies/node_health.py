"""Filter policy: an unavailable node takes no new jobs ("not now", layer ``health``).

Its verdict depends on the node alone, whatever the job (``declarations.NodeOnly``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.declarations import NodeOnly, NodeTraits, TraitRejection
from gpudock.scheduler.framework import SUCCESS, Rejection, Status
from gpudock.scheduler.snapshot import JobRequest

_LISTED = 3  # nodes named in one message before "and N more"
LAYER = "health"


def _why(name: str, reason: str | None) -> str:
    return f"{name} ({reason})" if reason else name


def _available(job: JobRequest, node: NodeTraits) -> Status:
    """``NodeHealth.filter``: the node's availability, whatever the job."""
    if node.available:
        return SUCCESS
    reason = f"node {node.name} unavailable"
    if node.unavailable_reason:
        reason += f": {node.unavailable_reason}"
    return Status.unschedulable(LAYER, reason)


class NodeHealth:
    """Rejects unavailable nodes with ``UNSCHEDULABLE``: they may come back."""

    name = "node_health"
    layer = LAYER
    declared = NodeOnly(_available, lambda job, rejected, total: word(rejected))

    def filter(self, job: JobRequest, node: NodeTraits) -> Status:
        return _available(job, node)

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """``node gpu-0 unavailable: <reason>``, or ``3 nodes unavailable: a (r), …``."""
        return word([(r.status, r.node) for r in rejections])


def word(rejected: Sequence[TraitRejection]) -> PendingReason:
    """``NodeHealth.explain`` of the nodes it rejected (``declarations.TraitRejection``)."""
    return health_reason([(node.name, node.unavailable_reason) for _, node in rejected])


def health_reason(down: Sequence[tuple[str, str | None]]) -> PendingReason:
    """The pending reason for unavailable nodes ``(name, reason)``, sorted by name (non-empty)."""
    if len(down) == 1:
        name, reason = down[0]
        message = f"node {name} unavailable" + (f": {reason}" if reason else "")
        return PendingReason(NodeHealth.layer, message, f"may run when {name} is available again")
    listed = ", ".join(_why(name, reason) for name, reason in down[:_LISTED])
    more = f", and {len(down) - _LISTED} more" if len(down) > _LISTED else ""
    return PendingReason(
        NodeHealth.layer,
        f"{len(down)} nodes unavailable: {listed}{more}",
        "may run when one of them is available again",
    )
