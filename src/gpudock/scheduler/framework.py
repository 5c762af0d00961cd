"""The scheduler framework: status codes and one ``Protocol`` per extension point.

Policy is separated from mechanism as in kube-scheduler: the cycle
(``cycle.py``) only walks the extension points below, in this order, and every
policy lives in its own module under ``policies/``, listed in ``registry.py``::

    OrderPolicy   sort key for pending jobs                 (who goes first)
    FilterPolicy  (job, node) -> Status                      (which nodes can take it)
                  + explain(rejections) -> PendingReason     (why none could)
    ScorePolicy   (job, node) -> float, higher is better     (which feasible node)
    GpuPicker     (job, node) -> GPU indices                 (which GPUs on it)

Reserving the picked GPUs is mechanism, not policy: ``CycleState.reserve``.

Contract for every filter and score policy: a pure function of the job's
``placement_key`` (what it asks for: GPU count, memory share, model) and of
the one node's state. It never mutates the ``NodeState`` it is given, does no
I/O and reads no clock. The cycle relies on that to evaluate each node once
per distinct request and then re-evaluate only the node a reservation
changed (``equivalence.py``). A policy that needs another job field must add
it to ``placement_key``.

The built-in filters and ``binpack``/``spread`` are also answered by the
capacity index (``scheduler/accel/``) from its buckets; any other filter in
the profile it runs through ``filter`` on the candidates it returns, so a new
filter is correct and fast with nothing else touched. Changing what a
built-in one checks means changing the index too;
``tests/unit/scheduler/accel/test_indexed.py`` catches a mismatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from gpudock.core.affinity import Toleration
from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import CycleState, NodeState
from gpudock.scheduler.snapshot import JobRequest

__all__ = [
    "CycleState",
    "FilterPolicy",
    "GpuPicker",
    "NodeState",
    "OrderKey",
    "OrderPolicy",
    "PlacementKey",
    "Profile",
    "Rejection",
    "ScorePolicy",
    "Status",
    "StatusCode",
    "placement_key",
]


class StatusCode(Enum):
    """What a filter says about one (job, node) pair.

    ``UNSCHEDULABLE`` means "not now": the node could take the job once
    capacity frees up or the node recovers, so preemption may help.
    ``UNRESOLVABLE`` means "never on this node" (wrong GPU model, too few GPUs
    in total): no eviction can help. ``ERROR`` is a bug or inconsistent input.
    """

    SUCCESS = "success"
    UNSCHEDULABLE = "unschedulable"
    UNRESOLVABLE = "unresolvable"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class Status:
    """A status code with a human reason and the layer that produced it.

    ``layer`` is one of ``PendingReason``'s layers (``devices``,
    ``constraints``, ``health``…); empty for ``SUCCESS``.
    """

    code: StatusCode
    reason: str = ""
    layer: str = ""

    @property
    def ok(self) -> bool:
        return self.code is StatusCode.SUCCESS

    @staticmethod
    def unschedulable(layer: str, reason: str) -> Status:
        return Status(StatusCode.UNSCHEDULABLE, reason, layer)

    @staticmethod
    def unresolvable(layer: str, reason: str) -> Status:
        return Status(StatusCode.UNRESOLVABLE, reason, layer)


SUCCESS = Status(StatusCode.SUCCESS)
"""The one shared success status; filters return it to avoid allocating."""


@dataclass(frozen=True, slots=True)
class Rejection:
    """One node that a filter rejected for a job, with the status it gave."""

    status: Status
    node: NodeState


PlacementKey = tuple[
    int,
    int | None,
    str | None,
    tuple[tuple[str, str], ...],
    tuple[Toleration, ...],
    str | None,
    float | None,
    int,
    int | None,
]


def placement_key(job: JobRequest) -> PlacementKey:
    """The only job fields filters and scorers may read.

    ``(gpus, gpu_memory, gpu_model, node_selector, tolerations, topology,
    cpus, nodes, memory)``. Jobs with equal keys get equal verdicts on every node,
    so the cycle shares verdicts between them.
    """
    return (
        job.gpus,
        job.gpu_memory,
        job.gpu_model,
        job.node_selector,
        job.tolerations,
        job.topology,
        job.cpus,
        job.nodes,
        job.memory,
    )


OrderKey = tuple[float, ...]


class OrderPolicy(Protocol):
    """Orders the pending jobs of a cycle: jobs are tried by ascending ``key``."""

    name: str

    def key(self, job: JobRequest) -> OrderKey:
        """A total order: ties must be broken (e.g. by job id) for determinism."""
        ...


class FilterPolicy(Protocol):
    """Decides whether a node can take a job, and explains rejections."""

    name: str
    layer: str

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        """``SUCCESS``, or a non-success ``Status`` whose layer is ``self.layer``."""
        ...

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """One pending reason summarising every node this filter rejected.

        Called only when the job could not be placed and this filter rejected
        at least one node; ``rejections`` are sorted by node name and
        ``total_nodes`` counts all nodes of the cycle. Like ``filter``, it may
        read only the job's ``placement_key`` fields.
        Return None when the rejections do not explain the wait (e.g. other
        nodes passed this filter and were rejected for another reason).
        """
        ...


class ScorePolicy(Protocol):
    """Ranks feasible nodes for a job; higher is better."""

    name: str

    def score(self, job: JobRequest, node: NodeState) -> float:
        """Only compared between nodes for the same job, so units are free."""
        ...


class GpuPicker(Protocol):
    """Chooses the GPUs for a job on the node the cycle selected."""

    name: str

    def pick(self, job: JobRequest, node: NodeState) -> list[int] | None:
        """``job.gpus`` distinct GPU indices usable now, or None if impossible.

        Must succeed whenever every filter passed. Never reserves: the cycle
        does that through ``CycleState.reserve``.
        """
        ...


@dataclass(frozen=True, slots=True)
class Profile:
    """The policies one scheduler runs: built from config by ``registry.build_profile``.

    ``filters`` run in order and the first non-success wins, so cheap and
    "never" (unresolvable) filters go first. ``scorers`` are summed with
    their weights.
    """

    order: OrderPolicy
    filters: tuple[FilterPolicy, ...]
    scorers: tuple[tuple[ScorePolicy, float], ...]
    picker: GpuPicker
