"""Filter policy: enough free host memory on nodes that count it (layer ``devices``).

Only nodes with a ``host_memory`` count memory, and only jobs that ask for
``memory`` take it (the server gives every job ``job_defaults.memory`` unless
it sets its own). A node with less memory than the job asks for in all is
``UNRESOLVABLE``; one whose memory is taken is ``UNSCHEDULABLE``.

It is the capacity model's ``HOST_MEMORY`` rule (``rules.py``), and declares so
(``declarations.NeedsHost``); ``CycleState.reserve`` takes the memory of each job it
places, and a node as it would be once some jobs left (``post_filter.py``) has their
``RunningJob.memory`` back.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudock.core.job import PendingReason
from gpudock.core.units import format_size
from gpudock.scheduler.declarations import NeedsHost
from gpudock.scheduler.framework import SUCCESS, NodeState, Rejection, Status
from gpudock.scheduler.rules import Resource, memory_ever, memory_now
from gpudock.scheduler.snapshot import JobRequest

LAYER = "devices"


def memory_reason(
    job: JobRequest, rejected: Sequence[tuple[str, float, float]], total_nodes: int
) -> PendingReason | None:
    """``MemoryCapacity.explain`` from ``(name, memory, free memory)`` of each node it
    rejected, sorted by name (an accelerator words it without the nodes' states)."""
    want = job.memory or 0
    busy = [(-int(free), name) for name, total, free in rejected if total >= want]
    if busy:  # ``UNSCHEDULABLE``: the node has the memory, taken
        most, name = min(busy)
        return PendingReason(
            LAYER,
            f"needs {format_size(want)} memory; the most free on one node is "
            f"{format_size(max(-most, 0))} ({name})",
            f"runs when {format_size(want + most)} more memory frees up on {name}",
        )
    if len(rejected) < total_nodes:
        return None  # other nodes have the memory: what rejected them explains the wait
    largest, name = min((-int(total), name) for name, total, _ in rejected)
    return PendingReason(
        LAYER,
        f"needs {format_size(want)} memory; the largest node has {format_size(-largest)} ({name})",
        f"needs a node with at least {format_size(want)} memory",
    )


class MemoryCapacity:
    name = "memory_capacity"
    field = "memory"  # the job field a refusal at submit blames
    layer = LAYER
    declared = NeedsHost(Resource.HOST_MEMORY, memory_reason)

    def skips(self, job: JobRequest) -> bool:
        """A job that asks for no memory fits every node (``framework.skipped``)."""
        return not job.memory

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if memory_now(job, node.host_memory, node.free_host_memory):
            return SUCCESS
        assert job.memory is not None and node.host_memory is not None
        if not memory_ever(job, node.host_memory):
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
        rows = [(r.node.name, r.node.host_memory or 0, r.node.free_host_memory) for r in rejections]
        return memory_reason(job, rows, total_nodes)
