"""Filter policy: a node without a GPU of the requested model can never take the job.

Its verdict depends on the node's GPU names and the job's model alone
(``declarations.NodeOnly``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import model_name_matches
from gpudock.scheduler.declarations import NodeOnly, NodeTraits, TraitRejection
from gpudock.scheduler.framework import SUCCESS, Rejection, Status
from gpudock.scheduler.snapshot import JobRequest


def _model(job: JobRequest) -> Hashable:
    """What the verdict reads of a job: its model, when it asks for GPUs."""
    return job.gpu_model if job.gpus else None


LAYER = "constraints"


def _has_model(job: JobRequest, node: NodeTraits) -> Status:
    """``GpuModel.filter``: a GPU of the job's model on the node, healthy or not."""
    model = job.gpu_model
    if model is None or job.gpus == 0:
        return SUCCESS
    last = None
    for g in node.gpus:  # a node's GPUs mostly share a name: each name looked up once
        name = g.name
        if name is not last and name != last:
            if model_name_matches(model, name):
                return SUCCESS
            last = name
    return Status.unresolvable(LAYER, f"no GPU of model {model} on node {node.name}")


def _word(
    job: JobRequest, rejected: Sequence[TraitRejection], total_nodes: int
) -> PendingReason | None:
    """``GpuModel.explain`` of the nodes it rejected (``declarations.TraitRejection``)."""
    if len(rejected) < total_nodes:
        return None
    return model_reason(job, {g.name for _, node in rejected for g in node.gpus})


class GpuModel:
    """Rejects nodes with no GPU of ``job.gpu_model`` as ``UNRESOLVABLE``.

    Unhealthy GPUs count as "having the model": they may recover. CPU-only
    jobs (``gpus == 0``) ignore the constraint.
    """

    name = "gpu_model"
    field = "gpu_model"  # the job field a refusal at submit blames
    layer = LAYER
    declared = NodeOnly(_has_model, _word, _model)

    def skips(self, job: JobRequest) -> bool:
        """A job without a model, or without GPUs, passes every node."""
        return job.gpu_model is None or job.gpus == 0

    def filter(self, job: JobRequest, node: NodeTraits) -> Status:
        return _has_model(job, node)

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """``no GPU of model H100 on any node (have: A100-40GB, T4)``.

        Only when no node at all has the model; otherwise the nodes that do
        have it explain the wait, and the others are irrelevant.
        """
        return _word(job, [(r.status, r.node) for r in rejections], total_nodes)


def model_reason(job: JobRequest, have: Iterable[str]) -> PendingReason:
    """The pending reason when no node has a GPU of ``job.gpu_model``; ``have``: every GPU name."""
    names = ", ".join(sorted(set(have))) or "no GPUs"
    return PendingReason(
        GpuModel.layer,
        f"no GPU of model {job.gpu_model} on any node (have: {names})",
        f"runs only once a node with {job.gpu_model} GPUs joins",
    )
