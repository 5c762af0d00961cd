"""The scheduler framework: status codes and one ``Protocol`` per extension point.

Policy is separated from mechanism as in kube-scheduler: the cycle
(``cycle.py``) only walks the extension points below, in this order, and every
policy lives in its own module under ``policies/``, listed in ``registry.py``::

    PreScorePolicy once per cycle: writes per-cycle data into the CycleState
    OrderPolicy   sort key for pending jobs                 (who goes first)
    FilterPolicy  (job, node) -> Status                      (which nodes can take it)
                  + explain(rejections) -> PendingReason     (why none could)
                  + optional skips(job) -> bool              (it admits every node: skip it)
    ScorePolicy   (job, node, state) -> float, higher is better (which feasible node)
    GpuPicker     (job, node, state) -> GPU indices          (which GPUs on it)

Reserving the picked GPUs is mechanism, not policy: ``CycleState.reserve``.

A filter may also define ``skips(job) -> bool``, kube-scheduler's PreFilter
``Skip``: True promises that ``filter`` returns ``SUCCESS`` for ``job`` on every
node in every state (``memory_capacity`` for a job that asks for no memory).
Like ``filter`` it reads only the job's ``placement_key``. The reference path
ignores it (running the filter gives the same answer); an accelerator may
leave the filter out for that job (``skipped``).

``PreScorePolicy`` is kube-scheduler's PreScore with its ``CycleState``: a
plugin that computes, once per cycle, what scorers and pickers read (the
share-price plugin: the LP prices of the job mix) and ``write``s it into the
cycle's ``CycleState``; scorers and pickers ``read`` it there. What it learns
between a caller's cycles it keeps in that caller's session (``PluginState``),
never in class variables. No plugin replaces or rebuilds another.

Contract for every filter and score policy: a pure function of the job's
``placement_key`` (what it asks for: GPU count, memory share, model), of the
one node's state and of the cycle's plugin data. It never mutates the
``NodeState`` or the ``CycleState`` it is given, does no I/O and reads no
clock. The cycle relies on that to evaluate each node once per distinct
request and then re-evaluate only the node a reservation changed
(``equivalence.py``). A policy that needs another job field must add it to
``placement_key``.

The same filters decide every step's feasibility question, not only
placement: preemption, the EASY reservation, elastic jobs and the submit-time
check ask them about a node as it would be once some jobs left
(``post_filter.py``, kube-scheduler's PostFilter).

How a policy may be answered faster is something it declares
(``declarations.py``): an accelerator reads declarations and never a policy's
class. A policy that declares nothing is still correct and fast: an
accelerator runs its own methods on the candidates it finds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar

from gpudock.core.affinity import Toleration
from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import CycleState, NodeState
from gpudock.scheduler.preemption_rules import DEFAULT_RULES, PreemptionRules
from gpudock.scheduler.snapshot import JobRequest, Snapshot

__all__ = [
    "CycleState",
    "FilterPolicy",
    "GpuPicker",
    "NodeState",
    "OrderKey",
    "OrderPolicy",
    "PlacementKey",
    "PluginState",
    "PreScorePolicy",
    "Profile",
    "Rejection",
    "ScorePolicy",
    "Status",
    "StatusCode",
    "placement_key",
    "reads",
    "skipped",
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
    str | None,
    int | None,
    str | None,
]


def placement_key(job: JobRequest) -> PlacementKey:
    """The only job fields filters and scorers may read.

    ``(gpus, gpu_memory, gpu_model, node_selector, tolerations, topology,
    cpus, nodes, memory, mig, gpu_compute, cuda_require)``. Jobs with equal keys get
    equal verdicts on every node, so the cycle shares verdicts between them.
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
        job.mig,
        job.gpu_compute,
        job.cuda_require,
    )


OrderKey = tuple[float, ...]


class OrderPolicy(Protocol):
    """Orders the pending jobs of a cycle: jobs are tried by ascending ``key``."""

    name: str

    def key(self, job: JobRequest) -> OrderKey:
        """A total order: ties must be broken (e.g. by job id) for determinism."""
        ...


class FilterPolicy(Protocol):
    """Decides whether a node can take a job, and explains rejections.

    Optional: ``skips(job)`` (module doc); ``declared``, how it may be accelerated
    (``declarations.py``); ``field``, the job field its rejections are about (``gpus``,
    ``node_selector``...), which a refusal at submit names (``feasibility.py``).
    """

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


def skipped(policy: FilterPolicy, job: JobRequest) -> bool:
    """True when ``policy`` defines ``skips`` and it says ``policy`` admits every node for
    ``job`` (see the module doc); False for a filter without it."""
    skips = getattr(policy, "skips", None)
    return skips is not None and bool(skips(job))


class ScorePolicy(Protocol):
    """Ranks feasible nodes for a job; higher is better."""

    name: str

    def score(self, job: JobRequest, node: NodeState, state: CycleState) -> float:
        """Only compared between nodes for the same job, so units are free. ``state`` is
        read only for this cycle's plugin data (``state.read``)."""
        ...


class GpuPicker(Protocol):
    """Chooses the GPUs for a job on the node the cycle selected."""

    name: str

    def pick(self, job: JobRequest, node: NodeState, state: CycleState) -> list[int] | None:
        """``job.gpus`` distinct GPU indices usable now, or None if impossible.

        Must succeed whenever every filter passed. Never reserves: the cycle
        does that through ``CycleState.reserve``. ``state`` as for ``ScorePolicy``.
        """
        ...


def reads(policy: object) -> tuple[type, ...]:
    """The kinds of cycle data ``policy`` reads (its optional ``reads`` attribute: a tuple of
    types); empty when it reads none. A pre-score plugin computes its data only when a
    policy of the profile reads it."""
    found = getattr(policy, "reads", ())
    return tuple(found) if isinstance(found, tuple) else ()


T = TypeVar("T")


class PluginState:
    """What pre-score plugins keep between one caller's cycles: one value per kind (a class
    with a no-argument constructor), made on first use. Owned by the caller's
    ``SchedulerSession``; a session-less ``schedule`` gets a fresh one per call.

    ``learn``: whether plugins may let what they saw in earlier cycles change this one's
    Plan (the share-price plugin's ``MixTracker``). False (the default) keeps the
    session's contract that no Plan depends on it; long-lived callers that want the
    live behaviour (the controller, the simulator) set it.
    """

    __slots__ = ("_kept", "learn")

    def __init__(self, learn: bool = False) -> None:
        self.learn = learn
        self._kept: dict[type, object] = {}

    def get(self, kind: type[T]) -> T:
        """The ``kind`` this state keeps, made with ``kind()`` on first use."""
        found = self._kept.get(kind)
        if found is None:
            found = self._kept[kind] = kind()
        assert isinstance(found, kind)
        return found


class PreScorePolicy(Protocol):
    """Computes once per cycle what the profile's scorers and picker read (kube-scheduler's
    PreScore)."""

    name: str

    def pre_score(
        self, snapshot: Snapshot, profile: Profile, state: CycleState, kept: PluginState
    ) -> None:
        """``state.write`` this cycle's data, when a policy of ``profile`` ``reads`` it;
        nothing otherwise. Called in step 2, once per cycle, before any job is tried;
        never mutates ``profile`` or ``snapshot``, does no I/O. What it keeps between
        cycles goes in ``kept.get(...)``; unless ``kept.learn``, what it writes is a
        function of ``snapshot`` and ``profile`` alone."""
        ...

    def prepare(self, profile: Profile) -> None:
        """Load what ``pre_score`` will need for ``profile`` (a solver's import), for a
        long-lived caller to run once at start, off its first cycle. Harmless to skip."""
        ...

    def relevant(self, job: JobRequest) -> bool:
        """False when ``pre_score`` computes nothing for a cycle whose pending jobs are all
        like ``job``: a caller that knows every job in advance (the simulator) may drop a
        plugin for which none is relevant."""
        ...


@dataclass(frozen=True, slots=True)
class Profile:
    """The policies one scheduler runs: built from config by ``registry.build_profile``.

    ``filters`` run in order and the first non-success wins, so cheap and
    "never" (unresolvable) filters go first. ``scorers`` are summed with
    their weights. ``pre_scorers`` run once per cycle, in order, before any job is
    scored (``PreScorePolicy``). ``preemption``: the rules of step 5
    (``preemption_rules.py``: protected time, restart cost, hysteresis).
    """

    order: OrderPolicy
    filters: tuple[FilterPolicy, ...]
    scorers: tuple[tuple[ScorePolicy, float], ...]
    picker: GpuPicker
    pre_scorers: tuple[PreScorePolicy, ...] = ()
    preemption: PreemptionRules = DEFAULT_RULES
