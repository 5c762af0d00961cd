"""Filter policy: GPUs out of service (quarantined, cordoned) take no placement.

A GPU that is not ``ok`` (a health event quarantined it, an admin cordoned it, or
discovery lost it) is not ``healthy`` to the capacity rules, so no job is placed on
it; this filter says so in the job's words. It rejects a node, ``UNSCHEDULABLE``
("not now": ``gpudock gpu uncordon`` brings a GPU back), when the job would fit its
GPUs were they all in service but does not fit the ones in service:

    node gpu-0 has 1 GPU out of service: GPU 1 quarantined: XID 48 (double bit ECC
    error); needs a GPU reset

The verdict reads the node's GPUs and their health (``NodeView.out_of_service``) and
the job's ``gpus``, ``gpu_memory`` and ``gpu_model``; never what runs there
(``declarations.NodeOnly``: it holds whatever leaves the node, so no step preempts
or reserves where it rejects). A job
without GPUs passes every node; so does every job on a node with all GPUs in service.
A GPU in MIG mode is not out of service (its MIG devices are its units:
``mig_capacity``, where a quarantined parent's devices are not free).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.declarations import NodeOnly, NodeTraits, when_every_node_rejects
from gpudock.scheduler.framework import SUCCESS, Rejection, Status
from gpudock.scheduler.node_state import model_name_matches
from gpudock.scheduler.snapshot import JobRequest

LAYER = "health"
_LISTED = 2  # GPUs named in one message before "and N more"


def health_verdict(job: JobRequest, node: NodeTraits) -> Status:
    """The filter's verdict for ``job`` on ``node`` (module doc)."""
    if job.gpus == 0 or not node.out_of_service:
        return SUCCESS
    share, model = job.gpu_memory, job.gpu_model
    fitting = {
        g.index
        for g in node.gpus
        if (model is None or model_name_matches(model, g.name))
        and (share is None or g.memory_total >= share)
    }
    in_service = sum(1 for g in node.gpus if g.index in fitting and g.healthy)
    out = [(index, why) for index, why in node.out_of_service if index in fitting]
    if in_service >= job.gpus or in_service + len(out) < job.gpus:
        return SUCCESS  # enough in service, or too few even with all: capacity says why
    listed = "; ".join(f"GPU {index} {why}" for index, why in out[:_LISTED])
    more = f"; and {len(out) - _LISTED} more" if len(out) > _LISTED else ""
    count = f"{len(out)} GPU{'s' * (len(out) > 1)}"
    return Status.unschedulable(
        LAYER, f"node {node.name} has {count} out of service: {listed}{more}"
    )


def _key(job: JobRequest) -> Hashable:
    """What the verdict reads of a job."""
    return (job.gpus, job.gpu_memory, job.gpu_model) if job.gpus else None


_word = when_every_node_rejects(
    LAYER, "runs when an admin brings a GPU back (gpudock gpu uncordon)"
)


class GpuHealth:
    """Rejects nodes whose GPUs out of service keep the job off (module doc)."""

    name = "gpu_health"
    layer = LAYER
    declared = NodeOnly(health_verdict, _word, _key, only_where="out_of_service")

    def skips(self, job: JobRequest) -> bool:
        """A job without GPUs passes every node."""
        return job.gpus == 0

    def filter(self, job: JobRequest, node: NodeTraits) -> Status:
        return health_verdict(job, node)

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """The first node's reason (and how many more), only when every node was rejected
        here; otherwise what rejected the others explains the wait."""
        return _word(job, [(r.status, r.node) for r in rejections], total_nodes)
