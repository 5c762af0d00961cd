"""Filter policy: jobs that require their GPUs in one NVLink domain or NUMA node (``topology``).

Only jobs with ``topology`` set and at least two GPUs are checked. A node
whose largest group (of the job's GPU model) is smaller than the job is
``UNRESOLVABLE``; one whose groups have too few usable GPUs now is
``UNSCHEDULABLE``. It is the capacity model's ``GPU_GROUP`` rule (``rules.py``), and
declares so (``declarations.NeedsGroup``). The GPU picker then chooses inside one such
group (``scheduler/topology.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudock.core.job import PendingReason
from gpudock.scheduler.declarations import NeedsGroup
from gpudock.scheduler.framework import SUCCESS, NodeState, Rejection, Status, StatusCode
from gpudock.scheduler.rules import group_ever, group_now, needs_group
from gpudock.scheduler.snapshot import JobRequest
from gpudock.scheduler.topology import LEVEL_WORDS


def _most(job: JobRequest, node: NodeState, ever: bool) -> int:
    return group_ever(job, node.gpus) if ever else group_now(job, node.gpus)


class GpuTopology:
    name = "gpu_topology"
    field = "topology"  # the job field a refusal at submit blames
    layer = "topology"
    declared = NeedsGroup()

    def skips(self, job: JobRequest) -> bool:
        """Only jobs with ``topology`` and two GPUs or more are checked."""
        return not needs_group(job)

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if not needs_group(job):
            return SUCCESS
        assert job.topology is not None
        words = LEVEL_WORDS[job.topology]
        ever = _most(job, node, ever=True)
        if ever < job.gpus:
            return Status.unresolvable(
                self.layer, f"node {node.name} has at most {ever} GPUs in one {words}"
            )
        now = _most(job, node, ever=False)
        if now < job.gpus:
            return Status.unschedulable(
                self.layer, f"node {node.name} has at most {now} usable GPUs in one {words}"
            )
        return SUCCESS

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """``needs 4 GPUs in one NVLink domain; the most free in one is 2 (node gpu-0)``."""
        assert job.topology is not None
        words = LEVEL_WORDS[job.topology]
        need = f"needs {job.gpus} GPUs in one {words}"
        busy = [r for r in rejections if r.status.code is StatusCode.UNSCHEDULABLE]
        if busy:
            count, name = min((-_most(job, r.node, ever=False), r.node.name) for r in busy)
            missing = job.gpus + count
            return PendingReason(
                self.layer,
                f"{need}; the most usable in one {words} is {-count} (node {name})",
                f"runs when {missing} more {'GPU' if missing == 1 else 'GPUs'} free up "
                f"in one {words} of {name}",
            )
        count, name = min((-_most(job, r.node, ever=True), r.node.name) for r in rejections)
        return PendingReason(
            self.layer,
            f"{need}; the largest {words} has {-count} (node {name})",
            f"needs a node with {job.gpus} GPUs in one {words}",
        )
