"""Filter policy: a MIG job needs a free MIG device of its profile (layer ``devices``).

A MIG device is an allocatable unit of its parent GPU (``NodeView.migs``); a job that
asks ``mig: <profile>`` takes one whole and no GPU (``JobRequest.mig``; its ``gpus`` is
0 to every GPU rule), and ``CycleState.reserve`` takes the device. A GPU in MIG mode
takes no whole-GPU or share job: the store shows it unhealthy to the GPU rules.

Verdicts, for a MIG job (every node passes for other jobs: ``skips``):

* the node has a free device of the profile: ``SUCCESS``;
* it has one, or a GPU whose MIG table (``core/mig.py``) offers the profile, but none
  is free: ``UNSCHEDULABLE`` (a device frees up, or an admin lays one out:
  ``gpudock mig plan``; gpudock never changes a MIG layout);
* else ``UNRESOLVABLE``: no GPU of the node can ever have such a device.

A running MIG job gives its device back once it stopped (``post_filter.node_after``), so
a MIG job may preempt the holder of a device of its profile, and be preempted, like any
job (``preemption.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from gpudock.core.job import PendingReason
from gpudock.core.mig import mig_model
from gpudock.scheduler.framework import SUCCESS, NodeState, Rejection, Status, StatusCode
from gpudock.scheduler.snapshot import JobRequest

LAYER = "devices"
_LISTED = 3  # nodes named in one message before "and N more"
UNRESOLVABLE = StatusCode.UNRESOLVABLE


def free_profiles(node: NodeState) -> Counter[str]:
    """How many free (healthy, unheld) MIG devices of each profile the node has."""
    return Counter(m.profile for m in node.migs if m.healthy and not m.held)


def offers(node: NodeState, profile: str) -> bool:
    """The node has a device of ``profile``, or a GPU whose MIG table offers it."""
    if any(m.profile == profile for m in node.migs):
        return True
    names = {g.name for g in node.gpus}
    return any((model := mig_model(n)) is not None and model.profile(profile) for n in names)


def what_is_free(node: NodeState) -> str:
    """``node gpu-0 has 2 free 1g.10gb, 1 free 2g.20gb`` or ``node gpu-0 has no free MIG
    device``."""
    free = free_profiles(node)
    if not free:
        return f"node {node.name} has no free MIG device"
    listed = ", ".join(f"{count} free {profile}" for profile, count in sorted(free.items()))
    return f"node {node.name} has {listed}"


class MigCapacity:
    """Rejects nodes without a free MIG device of the job's profile (module doc)."""

    name = "mig_capacity"
    field = "mig"  # the job field a refusal at submit blames
    layer = LAYER

    def skips(self, job: JobRequest) -> bool:
        """A job that asks for no MIG device passes every node."""
        return job.mig is None

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        profile = job.mig
        if profile is None:
            return SUCCESS
        if any(m.profile == profile and m.healthy and not m.held for m in node.migs):
            return SUCCESS
        if offers(node, profile):
            return Status.unschedulable(self.layer, what_is_free(node))
        return Status.unresolvable(
            self.layer, f"no GPU of node {node.name} offers MIG profile {profile}"
        )

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """``needs mig 3g.40gb; node gpu-0 has 2 free 1g.10gb``.

        Names the nodes that could have such a device (``UNSCHEDULABLE``); when none
        could, only if every node was rejected here: ``needs mig 3g.40gb; no node's GPUs
        offer it``.
        """
        busy = sorted((r for r in rejections if r.status.code is not UNRESOLVABLE), key=_name)
        if busy:
            listed = "; ".join(r.status.reason for r in busy[:_LISTED])
            more = f"; and {len(busy) - _LISTED} more nodes" if len(busy) > _LISTED else ""
            return PendingReason(
                self.layer,
                f"needs mig {job.mig}; {listed}{more}",
                f"runs when a {job.mig} device frees up, or an admin lays one out "
                "(gpudock mig plan)",
            )
        if len(rejections) < total_nodes:
            return None  # other nodes offer it: what rejected them explains the wait
        return PendingReason(
            self.layer,
            f"needs mig {job.mig}; no node's GPUs offer it",
            f"runs only once a node whose GPUs offer {job.mig} joins",
        )


def _name(rejection: Rejection) -> str:
    return rejection.node.name
