"""Filter policy: a node without a GPU of the requested model can never take the job.

Answered by the capacity index (``scheduler/accel/``) from its buckets, by this exact
class; changing what it checks means changing the index (``accel/test_indexed.py`` fails
until they agree). A new filter needs no such twin: the index runs it on its candidates.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import matches_model
from gpudock.scheduler.framework import SUCCESS, NodeState, Rejection, Status
from gpudock.scheduler.snapshot import JobRequest


class GpuModel:
    """Rejects nodes with no GPU of ``job.gpu_model`` as ``UNRESOLVABLE``.

    Unhealthy GPUs count as "having the model": they may recover. CPU-only
    jobs (``gpus == 0``) ignore the constraint.
    """

    name = "gpu_model"
    layer = "constraints"

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if job.gpu_model is None or job.gpus == 0:
            return SUCCESS
        if any(matches_model(job, g) for g in node.gpus):
            return SUCCESS
        return Status.unresolvable(
            self.layer, f"no GPU of model {job.gpu_model} on node {node.name}"
        )

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """``no GPU of model H100 on any node (have: A100-40GB, T4)``.

        Only when no node at all has the model; otherwise the nodes that do
        have it explain the wait, and the others are irrelevant.
        """
        if len(rejections) < total_nodes:
            return None
        return model_reason(job, {g.name for r in rejections for g in r.node.gpus})


def model_reason(job: JobRequest, have: Iterable[str]) -> PendingReason:
    """The pending reason when no node has a GPU of ``job.gpu_model``; ``have``: every GPU name."""
    names = ", ".join(sorted(set(have))) or "no GPUs"
    return PendingReason(
        GpuModel.layer,
        f"no GPU of model {job.gpu_model} on any node (have: {names})",
        f"runs only once a node with {job.gpu_model} GPUs joins",
    )
