"""What a policy may declare so that an accelerator answers faster, with the same result.

A policy is defined once, by its own methods (``filter``, ``explain``, ``score``,
``pick``): the reference, what the generic path runs. A declaration states a fact about
that definition. An accelerator (``acceleration.py``) relies on the facts declared and on
nothing else: it imports no policy and tests no class. A policy that declares nothing is
still accelerated: the accelerator runs its own methods on the candidates it found
(``accel/extra.py`` for filters, ``accel/ranked.py`` for scorers).

**Filters** declare one of these, as the attribute ``declared`` (``declared_filter``):

* ``NodeOnly``: the verdict, and the wording of its rejections, depend only on the
  node's own traits (``NodeTraits``: its name, labels, taints, availability, its GPUs'
  names, sizes and health, its GPU sharing mode and driver versions) and on
  ``key(job)``; never on what runs there, what is free, or other job fields. An
  accelerator runs ``check`` on a node's snapshot view once per key and node, keeps
  the verdict while the node's traits are the same (``same_traits``: a placement or an
  end changes the view, not the traits), and takes it to hold for the node as
  it would be after any jobs left. Its ``UNRESOLVABLE`` verdicts are "never on this
  node": the submit-time check refuses a job they rule out on every node
  (``feasibility.py``). ``key`` None: the verdict does not depend on the job.
  ``only_where`` names a trait that is empty on every node where the filter admits
  every job: an accelerator checks only the nodes where it is not.
  ``check`` and ``word`` are the filter's ``filter`` and ``explain``, typed for traits,
  so that an accelerator calls them on views without copying a node.
* ``NeedsGpus``, ``NeedsHost``, ``NeedsGroup``: the verdict is exactly the capacity
  model's rule for one resource (``rules.py``): ``SUCCESS`` iff the rule holds now,
  ``UNRESOLVABLE`` iff it could not hold were the node empty. ``word`` states the
  filter's ``explain`` from the rule's summaries of the rejected nodes, so that an
  accelerator can word a rejection of many nodes from its buckets: for ``GPUS``,
  ``(NodeFit of the job's model class, lowest name, count)`` per group of nodes alike
  in what the rule reads; for ``CPUS`` and ``HOST_MEMORY``, ``(name, total, free)``
  per node.

**Scorers** declare, per job, how nodes are ordered, with ``order(job, state)``
(``declared_order``; None: nothing declared for that job):

* ``Walked``: walking nodes by the capacity the job would leave them (``left_after``
  of ``NodeRoom.idle``/``free``), fewest left first when ``fewest``, else most, the
  score never increases. Without ``score`` it is strictly monotone in that capacity:
  the first node of the walk that passes the filters is the best (ties to the lowest
  name). With ``score``, a node's score is ``score(room)`` of its ``NodeRoom``, and
  ``ceiling(shapes)(rank)`` bounds the score of every node at ``rank`` or later: a
  node's rank is its idle GPUs (whole GPUs) or free shareable bytes (shares), negated
  when not ``fewest``; ``shapes()`` gives the walked nodes' ``Shapes`` (None: unknown),
  worked out only if called.
* ``Priced``: a one-GPU share goes where its GPU loses least: nodes are ordered by the
  least ``loss(size, free, share)`` over their usable GPUs, then free shareable memory,
  then name; ``judge`` gives a node's score and the capacity it would strand (as
  ``SharePricing.judge``), and a node that strands nothing scores no less than any node
  after it.

Scorers and pickers also declare which cycle data they read (``reads``, a tuple of
types; ``framework.reads``): a pre-score plugin computes only what is read.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from gpudock.core.affinity import Taint
from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import CycleState, NodeState
from gpudock.scheduler.framework import Status
from gpudock.scheduler.node_fit import NodeFit
from gpudock.scheduler.rules import Resource
from gpudock.scheduler.snapshot import JobRequest

__all__ = [
    "FitGroup",
    "GpuTraits",
    "HostRow",
    "Needs",
    "NeedsGpus",
    "NeedsGroup",
    "NeedsHost",
    "NodeOnly",
    "NodeRoom",
    "NodeTraits",
    "Priced",
    "Shapes",
    "TraitRejection",
    "TraitWord",
    "Walked",
    "declared_filter",
    "declared_order",
    "room_of",
    "room_of_fit",
    "same_traits",
    "when_every_node_rejects",
]


class GpuTraits(Protocol):
    """What a node-only filter may read of a GPU (a ``GpuView`` or a ``GpuState``)."""

    @property
    def uuid(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def memory_total(self) -> int: ...
    @property
    def healthy(self) -> bool: ...


class NodeTraits(Protocol):
    """What a node-only filter may read of a node (a ``NodeView`` or a ``NodeState``): what
    it is, never what runs there."""

    @property
    def name(self) -> str: ...
    @property
    def available(self) -> bool: ...
    @property
    def unavailable_reason(self) -> str | None: ...
    @property
    def labels(self) -> tuple[tuple[str, str], ...]: ...
    @property
    def taints(self) -> tuple[Taint, ...]: ...
    @property
    def gpus(self) -> Sequence[GpuTraits]: ...
    @property
    def cpus(self) -> float | None: ...
    @property
    def host_memory(self) -> int | None: ...
    @property
    def gpu_sharing(self) -> str | None: ...
    @property
    def cuda_version(self) -> str | None: ...
    @property
    def driver_version(self) -> str | None: ...
    @property
    def out_of_service(self) -> tuple[tuple[int, str], ...]: ...


def same_traits(a: NodeTraits, b: NodeTraits) -> bool:
    """``a`` and ``b`` agree in everything ``NodeTraits`` and ``GpuTraits`` name: a node-only
    filter's verdict for one is its verdict for the other. Usage (what is free, what runs)
    is not compared."""
    if a is b:
        return True
    if (
        a.name != b.name
        or a.available is not b.available
        or a.unavailable_reason != b.unavailable_reason
        or a.labels != b.labels
        or a.taints != b.taints
        or a.cpus != b.cpus
        or a.host_memory != b.host_memory
        or a.gpu_sharing != b.gpu_sharing
        or a.cuda_version != b.cuda_version
        or a.driver_version != b.driver_version
        or a.out_of_service != b.out_of_service
    ):
        return False
    gpus_a, gpus_b = a.gpus, b.gpus
    if len(gpus_a) != len(gpus_b):
        return False
    for x, y in zip(gpus_a, gpus_b, strict=True):
        if x is not y and (
            x.uuid != y.uuid
            or x.index != y.index
            or x.name != y.name
            or x.memory_total != y.memory_total
            or x.healthy is not y.healthy
        ):
            return False
    return True


TraitRejection = tuple[Status, NodeTraits]
"""A node a node-only filter rejected: its status and the node's traits."""


@dataclass(frozen=True, slots=True)
class NodeOnly:
    """A filter's verdict depends only on the node's traits and ``key(job)`` (module doc).

    ``check``: the filter's own ``filter``, typed for traits; ``word``: its own
    ``explain``, typed for traits (rejections sorted by node name). ``key`` None: the
    verdict is the same for every job. ``only_where``: None, or the name of a
    ``NodeTraits`` field such that ``check`` admits every job on a node where that field
    is empty (false).
    """

    check: Callable[[JobRequest, NodeTraits], Status]
    word: TraitWord
    key: Callable[[JobRequest], Hashable] | None = None
    only_where: str | None = None


TraitWord = Callable[[JobRequest, Sequence[TraitRejection], int], PendingReason | None]
"""``NodeOnly.word``: a filter's ``explain`` of the nodes it rejected, typed for traits."""


def when_every_node_rejects(layer: str, counterfactual: str) -> TraitWord:
    """A ``NodeOnly.word`` that speaks only when every node rejects the job: the first
    rejected node's reason (by name), how many more nodes rejected it, and
    ``counterfactual``; None while some node admits it."""

    def word(
        job: JobRequest, rejected: Sequence[TraitRejection], total: int
    ) -> PendingReason | None:
        if not rejected or len(rejected) < total:
            return None
        status, _ = min(rejected, key=lambda r: r[1].name)
        others = len(rejected) - 1
        more = f" (and {others} more node{'s' * (others > 1)})" if others else ""
        return PendingReason(layer, status.reason + more, counterfactual)

    return word


FitGroup = tuple[NodeFit, str, int]
"""Nodes alike in what ``GPUS`` reads for one job: a member's fit (for the job's model
class), the lowest name, how many."""

HostRow = tuple[str, float, float]
"""One node, for ``CPUS`` and ``HOST_MEMORY``: its name, what it counts and what is free."""


@dataclass(frozen=True, slots=True)
class NeedsGpus:
    """A filter's verdict is the capacity model's ``GPUS`` rule (module doc).

    ``word(job, groups, total_nodes)``: its ``explain`` of the rejected nodes, grouped
    (``FitGroup``s; any order).
    """

    word: Callable[[JobRequest, Sequence[FitGroup], int], PendingReason | None]


@dataclass(frozen=True, slots=True)
class NeedsHost:
    """A filter's verdict is the capacity model's ``CPUS`` or ``HOST_MEMORY`` rule.

    ``word(job, rows, total_nodes)``: its ``explain`` of the rejected nodes (``HostRow``s,
    sorted by name).
    """

    resource: Resource
    word: Callable[[JobRequest, Sequence[HostRow], int], PendingReason | None]


@dataclass(frozen=True, slots=True)
class NeedsGroup:
    """A filter's verdict is the capacity model's ``GPU_GROUP`` rule (jobs with a
    ``topology`` and two GPUs or more; every node passes for other jobs)."""


Needs = NeedsGpus | NeedsHost | NeedsGroup


class NodeRoom(NamedTuple):
    """What a ``Walked`` score reads of a node: its GPUs, the largest GPU's memory, its idle
    GPUs and free shareable memory (``NodeState.idle_gpus``, ``free_memory``), and its
    CPUs (None: not counted) and free CPUs."""

    gpus: int
    largest: int
    idle: int
    free: int
    cpus: float | None
    free_cpus: float


Shapes = tuple[frozenset[tuple[float, int, int]], float]
"""The walked nodes' ``(CPUs, GPUs, largest GPU memory)`` (those with GPUs), and the most
CPUs free on one of them when the cycle started."""


@dataclass(frozen=True, slots=True)
class Walked:
    """Nodes ordered by the capacity the job would leave them (module doc)."""

    fewest: bool
    score: Callable[[NodeRoom], float] | None = None
    ceiling: Callable[[Callable[[], Shapes | None]], Callable[[int], float]] | None = None


def room_of(node: NodeState) -> NodeRoom:
    """A node's ``NodeRoom`` as it is now."""
    largest = max([g.memory_total for g in node.gpus], default=0)
    return NodeRoom(
        len(node.gpus), largest, node.idle_gpus, node.free_memory, node.cpus, node.free_cpus
    )


def room_of_fit(fit: NodeFit, cpus: float | None, free_cpus: float) -> NodeRoom:
    """The ``NodeRoom`` of a node whose ``ANY_MODEL`` fit is ``fit`` (its ``room_of``)."""
    largest = fit.sizes[0] if fit.sizes else 0
    return NodeRoom(fit.total, largest, fit.idle_all, fit.free_all, cpus, free_cpus)


@dataclass(frozen=True, slots=True)
class Priced:
    """One-GPU shares ordered by the loss of their GPU at the job mix's prices (module doc).

    ``judge(job, pairs, node_pairs, free_all, free_cpus)``: ``SharePricing.judge``.
    """

    loss: Callable[[int, int, int], int]
    judge: Callable[
        [JobRequest, Sequence[tuple[int, ...]], Sequence[tuple[int, ...]], int, float | None],
        tuple[float, float] | None,
    ]


ScoreOrder = Walked | Priced


def declared_filter(policy: object) -> NodeOnly | Needs | None:
    """What a filter declares (its ``declared`` attribute), or None."""
    found = getattr(policy, "declared", None)
    return found if isinstance(found, NodeOnly | NeedsGpus | NeedsHost | NeedsGroup) else None


def declared_order(policy: object, job: JobRequest, state: CycleState) -> ScoreOrder | None:
    """How a scorer orders nodes for ``job`` this cycle (its ``order`` method), or None."""
    order = getattr(policy, "order", None)
    if order is None:
        return None
    found = order(job, state)
    return found if isinstance(found, Walked | Priced) else None
