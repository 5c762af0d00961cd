"""Filter policy: a node's GPU sharing mode decides which shared jobs it may ever take.

A node shares its GPUs one way (``executor.sharing``, resolved by its GPU monitor and
stored as ``NodeView.gpu_sharing``):

* ``exclusive``: jobs get whole GPUs only; a memory share is never placed there;
* ``time-slice``: shares run side by side with no compute limit, so a job that asks
  for ``gpu_compute`` (an MPS active-thread percentage) is never placed there;
* ``mps``: both; unknown (None, a node whose monitor has not reported yet): both.

The verdict depends on the node's mode and the job's ``gpu_memory``/``gpu_compute``
alone (``declarations.NodeOnly``), and is ``UNRESOLVABLE`` ("never on this node"):
the submit-time check refuses a job no node's mode admits, and no step preempts for
it there.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.declarations import NodeOnly, NodeTraits, when_every_node_rejects
from gpudock.scheduler.framework import SUCCESS, Rejection, Status
from gpudock.scheduler.snapshot import JobRequest

LAYER = "constraints"
EXCLUSIVE, TIME_SLICE = "exclusive", "time-slice"


def sharing_verdict(job: JobRequest, mode: str | None, node: str) -> Status:
    """The filter's verdict for ``job`` on node ``node`` whose mode is ``mode``."""
    if not job.shared:
        return SUCCESS
    if mode == EXCLUSIVE:
        return Status.unresolvable(
            LAYER,
            f"node {node} gives whole GPUs only (executor.sharing: exclusive): "
            "a gpu_memory share never runs there",
        )
    if mode == TIME_SLICE and job.gpu_compute is not None:
        return Status.unresolvable(
            LAYER,
            f"node {node} time-slices its GPUs (executor.sharing: time-slice), which "
            "cannot hold a job to a compute share: gpu_compute needs MPS",
        )
    return SUCCESS


def _check(job: JobRequest, node: NodeTraits) -> Status:
    """``GpuSharing.filter``, typed for traits (``declarations.NodeOnly``)."""
    return sharing_verdict(job, node.gpu_sharing, node.name)


def _key(job: JobRequest) -> Hashable:
    """What the verdict reads of a job."""
    return (job.shared, job.gpu_compute is not None)


_word = when_every_node_rejects(LAYER, "runs only on a node whose executor.sharing allows it")


class GpuSharing:
    """Rejects nodes whose sharing mode cannot run the job's share (module doc)."""

    name = "gpu_sharing"
    field = "gpu_compute"  # the job field a refusal at submit blames
    layer = LAYER
    declared = NodeOnly(_check, _word, _key)

    def skips(self, job: JobRequest) -> bool:
        """A job with whole GPUs (or none) passes every node."""
        return not job.shared

    def filter(self, job: JobRequest, node: NodeTraits) -> Status:
        return _check(job, node)

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """Only when every node was rejected here: the first node's reason, and how many."""
        return _word(job, [(r.status, r.node) for r in rejections], total_nodes)
