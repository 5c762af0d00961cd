"""GPU picker: lowest-index idle GPUs for whole-GPU jobs, best fit for shared jobs.

A later issue replaces the whole-GPU rule with a topology-aware one (NVLink
islands, PCIe switches); the contract stays ``GpuPicker``.
"""

from __future__ import annotations

from gpudock.scheduler.capacity import GpuState, usable_now
from gpudock.scheduler.framework import NodeState
from gpudock.scheduler.snapshot import JobRequest


def _best_fit_key(gpu: GpuState) -> tuple[bool, int, int]:
    """Already-shared GPUs first, then the least free memory, then the index."""
    return (gpu.idle, gpu.free_memory, gpu.index)


class BestFitPicker:
    """Picks GPUs on the chosen node; never reserves them.

    * whole-GPU jobs: the ``gpus`` lowest-index healthy idle GPUs of the model;
    * shared jobs: best fit. GPUs already shared come first, tightest first
      (least free memory that still holds the share), so idle GPUs stay whole
      for exclusive jobs;
    * CPU-only jobs: no GPUs.

    Returns None when the node has too few usable GPUs (a filter should
    have rejected it).
    """

    name = "best_fit"

    def pick(self, job: JobRequest, node: NodeState) -> list[int] | None:
        if job.gpus == 0:
            return []
        if not job.shared:  # the lowest indices: stop once there are enough
            picked: list[int] = []
            for g in node.gpus:  # sorted by index
                if usable_now(job, g):
                    picked.append(g.index)
                    if len(picked) == job.gpus:
                        return picked
            return None
        usable = [g for g in node.gpus if usable_now(job, g)]
        if len(usable) < job.gpus:
            return None
        usable.sort(key=_best_fit_key)
        return [g.index for g in usable[: job.gpus]]
