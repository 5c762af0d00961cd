"""Filter policy: a node whose driver cannot run the job's image never takes it.

An image states the drivers it runs on in ``NVIDIA_REQUIRE_*`` (``cuda>=12.4``, with
alternatives such as ``brand=tesla,driver>=470,driver<471``: ``core/cuda_require.py``);
the server reads them when the job is submitted (``JobRequest.cuda_require``). A node
is rejected, ``UNRESOLVABLE`` ("never on this node": its driver would have to be
upgraded), when its driver's CUDA and driver versions surely break a requirement; a
fact the node does not report (its CUDA version unknown, its GPUs' brand) may hold, so
it never rejects on a guess. Its words name both versions::

    image needs CUDA ≥ 12.4; node gpu-0 driver supports 12.2

The verdict depends on the node's versions and the job's requirement alone
(``declarations.NodeOnly``). A job
without GPUs passes every node (the toolkit checks requirements only where it hands
out GPUs); so does one whose requirements are unknown or none.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from gpudock.core.cuda_require import GpuFacts, requirements_of
from gpudock.core.job import PendingReason
from gpudock.scheduler.declarations import NodeOnly, NodeTraits, when_every_node_rejects
from gpudock.scheduler.framework import SUCCESS, Rejection, Status
from gpudock.scheduler.snapshot import JobRequest

LAYER = "constraints"


def cuda_verdict(job: JobRequest, cuda: str | None, driver: str | None, node: str) -> Status:
    """The filter's verdict for ``job`` on node ``node`` whose driver supports CUDA
    ``cuda`` and has version ``driver``."""
    if job.cuda_require is None or (job.gpus == 0 and job.mig is None):
        return SUCCESS
    requirements = requirements_of(job.cuda_require)
    if requirements is None:
        return SUCCESS
    why = requirements.refuses(GpuFacts.of(cuda, driver, None, None))
    if why is None:
        return SUCCESS
    return Status.unresolvable(LAYER, why.replace("; driver", f"; node {node} driver", 1))


def _check(job: JobRequest, node: NodeTraits) -> Status:
    """``CudaCompat.filter``, typed for traits (``declarations.NodeOnly``)."""
    return cuda_verdict(job, node.cuda_version, node.driver_version, node.name)


def _key(job: JobRequest) -> Hashable:
    """What the verdict reads of a job: its requirements, when it takes a GPU or a MIG
    device."""
    return None if job.gpus == 0 and job.mig is None else job.cuda_require


_word = when_every_node_rejects(LAYER, "runs once a node's driver supports the image")


class CudaCompat:
    """Rejects nodes whose driver is too old for the job's image (module doc)."""

    name = "cuda_compat"
    field = "image"  # the job field a refusal at submit blames
    layer = LAYER
    declared = NodeOnly(_check, _word, _key)

    def skips(self, job: JobRequest) -> bool:
        """A job without requirements, or without GPUs, passes every node."""
        return job.cuda_require is None or (job.gpus == 0 and job.mig is None)

    def filter(self, job: JobRequest, node: NodeTraits) -> Status:
        return _check(job, node)

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """Only when every node was rejected here (else the others say why the job
        waits): the nodes' reasons, ``image needs CUDA ≥ 12.4; node gpu-0 driver
        supports 12.2``."""
        return _word(job, [(r.status, r.node) for r in rejections], total_nodes)
