"""Filter policy: enough free CPU cores on nodes that schedule CPUs (layer ``devices``).

Only nodes that declare ``cpus`` count CPUs, and only jobs that ask for
``cpus`` take them. A node with fewer cores than the job asks for in all is
``UNRESOLVABLE``; one whose cores are taken is ``UNSCHEDULABLE``. It is the
capacity model's ``CPUS`` rule (``rules.py``), and declares so
(``declarations.NeedsHost``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.declarations import NeedsHost
from gpudock.scheduler.framework import SUCCESS, NodeState, Rejection, Status
from gpudock.scheduler.rules import CPU_EPSILON, Resource, cpus_ever, cpus_now
from gpudock.scheduler.snapshot import JobRequest

LAYER = "devices"


def cpus_reason(
    job: JobRequest, rejected: Sequence[tuple[str, float, float]], total_nodes: int
) -> PendingReason | None:
    """``CpuCapacity.explain`` from ``(name, CPUs, free CPUs)`` of each node it rejected
    (the capacity index words it without the nodes' states)."""
    want = job.cpus or 0.0
    busy = [(-free, name) for name, cpus, free in rejected if not cpus + CPU_EPSILON < want]
    if busy:  # ``UNSCHEDULABLE``: the node has the cores, taken
        most, name = min(busy)
        return PendingReason(
            LAYER,
            f"needs {job.cpus:g} CPUs; the most free on one node is {-most:g} ({name})",
            f"runs when {want + most:g} more CPUs free up on {name}",
        )
    if len(rejected) < total_nodes:
        return None  # other nodes have the CPUs: what rejected them explains the wait
    largest, name = min((-cpus, name) for name, cpus, _ in rejected)
    return PendingReason(
        LAYER,
        f"needs {job.cpus:g} CPUs; the largest node has {-largest:g} ({name})",
        f"needs a node with at least {job.cpus:g} CPUs",
    )


class CpuCapacity:
    name = "cpu_capacity"
    field = "cpus"  # the job field a refusal at submit blames
    layer = LAYER
    declared = NeedsHost(Resource.CPUS, cpus_reason)

    def skips(self, job: JobRequest) -> bool:
        """A job that asks for no CPUs fits every node."""
        return not job.cpus

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if cpus_now(job, node.cpus, node.free_cpus):
            return SUCCESS
        assert job.cpus is not None and node.cpus is not None
        if not cpus_ever(job, node.cpus):
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
        rejected = [(r.node.name, r.node.cpus or 0.0, r.node.free_cpus) for r in rejections]
        return cpus_reason(job, rejected, total_nodes)
