"""Score policy: pack jobs onto the fullest nodes, keeping whole nodes free for big jobs.

Mirrored by the capacity index (``scheduler/indexed.py``): change both together.
"""

from __future__ import annotations

from gpudock.scheduler.capacity import capacity_left
from gpudock.scheduler.framework import NodeState
from gpudock.scheduler.snapshot import JobRequest


class Binpack:
    """Prefers the node with the least free capacity left after placement.

    Capacity is idle GPUs for whole-GPU jobs and GiB of shareable GPU memory
    for shared jobs (``capacity_left``).
    """

    name = "binpack"

    def score(self, job: JobRequest, node: NodeState) -> float:
        return -capacity_left(job, node)
