"""Filter policy: enough free CPU cores on nodes that schedule CPUs (layer ``devices``).

Only nodes that declare ``cpus`` count CPUs, and only jobs that ask for
``cpus`` take them. A node with fewer cores than the job asks for in all is
``UNRESOLVABLE``; one whose cores are taken is ``UNSCHEDULABLE``.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.framework import SUCCESS, NodeState, Rejection, Status, StatusCode
from gpudock.scheduler.snapshot import JobRequest

_EPSILON = 1e-9


def cpus_fit(job: JobRequest, node: NodeState) -> bool:
    """True when the node does not count CPUs, the job asks for none, or enough are free."""
    return not job.cpus or node.cpus is None or job.cpus <= node.free_cpus + _EPSILON


class CpuCapacity:
    name = "cpu_capacity"
    layer = "devices"

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if cpus_fit(job, node):
            return SUCCESS
        assert job.cpus is not None and node.cpus is not None
        if node.cpus + _EPSILON < job.cpus:
            return Status.unresolvable(self.layer, f"node {node.name} has {node.cpus:g} CPUs")
        return Status.unschedulable(
            self.layer, f"node {node.name} has {node.free_cpus:g} CPUs free"
        )

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """``needs 8 CPUs; the most free on one node is 4 (gpu-3)``.

        When no rejected node is merely busy: ``needs a node with at least 8
        CPUs``, but only when every node was rejected here (a node that has
        the CPUs and was rejected for something else explains the wait).
        """
        want = job.cpus or 0.0
        busy = [r for r in rejections if r.status.code is StatusCode.UNSCHEDULABLE]
        if busy:
            most, name = min((-r.node.free_cpus, r.node.name) for r in busy)
            return PendingReason(
                self.layer,
                f"needs {job.cpus:g} CPUs; the most free on one node is {-most:g} ({name})",
                f"runs when {want + most:g} more CPUs free up on {name}",
            )
        if len(rejections) < total_nodes:
            return None  # other nodes have the CPUs: what rejected them explains the wait
        largest, name = min((-(r.node.cpus or 0.0), r.node.name) for r in rejections)
        return PendingReason(
            self.layer,
            f"needs {job.cpus:g} CPUs; the largest node has {-largest:g} ({name})",
            f"needs a node with at least {job.cpus:g} CPUs",
        )
