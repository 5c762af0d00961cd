"""GPU picker: topology-aware sets for whole-GPU jobs, best fit for shared jobs.

The contract is ``GpuPicker``; the rules for whole GPUs live in
``scheduler/topology.py`` (smallest NVLink domain that fits, then NUMA node,
then lowest indices; with no topology data, simply the lowest indices).
"""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from gpudock.scheduler.capacity import CycleState, GpuState, usable_now
from gpudock.scheduler.framework import NodeState
from gpudock.scheduler.policies.share_price.mix import priced
from gpudock.scheduler.policies.share_price.pricing import SharePricing
from gpudock.scheduler.snapshot import JobRequest
from gpudock.scheduler.topology import choose, groups


def _best_fit_key(gpu: GpuState) -> tuple[bool, int, int]:
    """Already-shared GPUs first, then the least free memory, then the index."""
    return (gpu.idle, gpu.free_memory, gpu.index)


@mypyc_attr(native_class=False)  # compiled, the registry still reads ``name`` and __init__ hints
class BestFitPicker:
    """Picks GPUs on the chosen node; never reserves them.

    * whole-GPU jobs: ``topology.choose`` over the healthy idle GPUs of the
      model (one NVLink domain, one NUMA node when they fit; required when
      the job sets ``topology``);
    * shared jobs: best fit. GPUs already shared come first, tightest first
      (least free memory that still holds the share), so idle GPUs stay whole
      for exclusive jobs; a ``topology`` requirement first narrows the GPUs
      to the smallest group with enough of them;
    * CPU-only jobs: no GPUs.

    When the cycle has share prices (``SharePricing``, written into the ``CycleState``
    by the share-price plugin's pre-score step), a share of one GPU on one node takes
    the GPU ``SharePricing.pick`` names: the least loss at the job mix's share prices,
    then best fit, the GPU ``binpack`` scored.

    Returns None when the node has too few usable GPUs (a filter should
    have rejected it).
    """

    name = "best_fit"

    def pick(self, job: JobRequest, node: NodeState, state: CycleState) -> list[int] | None:
        if job.gpus == 0:
            return []
        pricing = state.read(SharePricing) if priced(job) else None
        if pricing is not None:
            return pricing.pick(job, node)
        return best_fit(job, node)


def best_fit(job: JobRequest, node: NodeState) -> list[int] | None:
    """``BestFitPicker.pick`` without share prices (the rules of its class doc)."""
    if job.gpus == 0:
        return []
    if job.gpu_memory is None and job.gpu_model is None:  # ``usable_now``, inlined
        usable = [
            g
            for g in node.gpus
            if g.healthy and not g.exclusive and g.shared_jobs == 0 and g.used_memory == 0
        ]
    else:
        usable = [g for g in node.gpus if usable_now(job, g)]
    if not job.shared:
        chosen = choose(usable, job.gpus, job.topology)
        return None if chosen is None else [g.index for g in chosen]
    if len(usable) < job.gpus:
        return None
    if job.topology is not None and job.gpus >= 2:
        fitting = [
            (len(v), key, v)
            for key, v in groups(usable, job.topology).items()
            if len(v) >= job.gpus
        ]
        if not fitting:
            return None
        usable = min(fitting, key=lambda f: (f[0], f[1]))[2]
    usable.sort(key=_best_fit_key)
    return [g.index for g in usable[: job.gpus]]
