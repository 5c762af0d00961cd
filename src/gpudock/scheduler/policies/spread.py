"""Score policy: spread jobs over the emptiest nodes, to limit interference.

It declares its order (``declarations.Walked``): most capacity left first, exactly.

"""

from __future__ import annotations

from gpudock.scheduler.capacity import CycleState, capacity_left
from gpudock.scheduler.declarations import Walked
from gpudock.scheduler.framework import NodeState
from gpudock.scheduler.snapshot import JobRequest


class Spread:
    """Prefers the node with the most free capacity left after placement.

    Capacity is idle GPUs for whole-GPU jobs and GiB of shareable GPU memory
    for shared jobs (``capacity_left``).
    """

    name = "spread"

    def score(self, job: JobRequest, node: NodeState, state: CycleState) -> float:
        return capacity_left(job, node)

    def order(self, job: JobRequest, state: CycleState) -> Walked:
        """Most capacity left first: the score is that capacity (``declarations.Walked``)."""
        return Walked(fewest=False)
