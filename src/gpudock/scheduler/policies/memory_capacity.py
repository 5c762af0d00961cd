"""Filter policy: enough free host memory on nodes that count it (layer ``devices``).

Only nodes with a ``host_memory`` count memory, and only jobs that ask for
``memory`` take it (the server gives every job ``job_defaults.memory`` unless
it sets its own). A node with less memory than the job asks for in all is
``UNRESOLVABLE``; one whose memory is taken is ``UNSCHEDULABLE``.

Nothing else in the scheduler knows this filter: the cycle and the capacity
index run it like any other (the index leaves it out for a job that asks for
no memory: ``skips``), and ``CycleState.reserve`` takes the memory of
each job it places. Preemption (victim sets) and the EASY reservation (its shadow
time) count memory as they count CPUs, from ``RunningJob.memory`` (``release.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudock.core.job import PendingReason
from gpudock.core.units import format_size
from gpudock.scheduler.framework import SUCCESS, NodeState, Rejection, Status
from gpudock.scheduler.snapshot import JobRequest


def memory_fits(job: JobRequest, node: NodeState) -> bool:
    """True when the node does not count memory, the job asks for none, or enough is free."""
    want = job.memory
    return not want or node.host_memory is None or want <= node.free_host_memory


class MemoryCapacity:
    name = "memory_capacity"
    layer = "devices"

    def skips(self, job: JobRequest) -> bool:
        """A job that asks for no memory fits every node (``framework.skipped``)."""
        return not job.memory

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if memory_fits(job, node):
            return SUCCESS
        assert job.memory is not None and node.host_memory is not None
        if node.host_memory < job.memory:
            return Status.unresolvable(
                self.layer, f"node {node.name} has {format_size(node.host_memory)} memory"
            )
        free = format_size(max(node.free_host_memory, 0))
        return Status.unschedulable(self.layer, f"node {node.name} has {free} memory free")

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """``needs 8GiB memory; the most free on one node is 2GiB (gpu-3)``.

        When no rejected node is merely busy: ``needs a node with at least
        8GiB memory``, but only when every node was rejected here.
        """
        want = job.memory or 0
        rejected = [
            (r.node.name, r.node.host_memory or 0, r.node.free_host_memory) for r in rejections
        ]
        busy = [(-free, name) for name, total, free in rejected if total >= want]
        if busy:  # ``UNSCHEDULABLE``: the node has the memory, taken
            most, name = min(busy)
            return PendingReason(
                self.layer,
                f"needs {format_size(want)} memory; the most free on one node is "
                f"{format_size(max(-most, 0))} ({name})",
                f"runs when {format_size(want + most)} more memory frees up on {name}",
            )
        if len(rejected) < total_nodes:
            return None  # other nodes have the memory: what rejected them explains the wait
        largest, name = min((-total, name) for name, total, _ in rejected)
        return PendingReason(
            self.layer,
            f"needs {format_size(want)} memory; the largest node has "
            f"{format_size(-largest)} ({name})",
            f"needs a node with at least {format_size(want)} memory",
        )
