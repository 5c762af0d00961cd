"""The cycle's mutable capacity model: what is still free while a cycle places jobs.

The ``Snapshot`` is frozen; a cycle copies it once into ``CycleState`` and
every reservation updates that copy, so a job placed early in the cycle
reduces the capacity later jobs see. Nothing here ever mutates the snapshot.

Policies only read this model; the cycle changes it only through
``CycleState.reserve``, which logs the node it changed so that cached
verdicts (``equivalence.py``, ``indexed.py``) re-evaluate just that node.

A node's ``NodeState`` is copied from its ``NodeView`` on first access, so a
cycle that touches few nodes (the capacity index reads the views) does not
pay for copying every GPU. ``CycleState.fit`` summarises a node's capacity
(``node_fit.NodeFit``) once per change, for every reader of the cycle.
``NodeState``, ``GpuState`` and what a job may use of them are in
``node_state.py`` (importable from here too).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from gpudock.scheduler.node_fit import ANY_MODEL, NodeFit, node_fit, refit
from gpudock.scheduler.node_state import (
    AnyGpu,
    GpuState,
    MigState,
    NodeState,
    capacity_left,
    left_after,
    matches_model,
    model_gpus,
    model_name_matches,
    usable_now,
)
from gpudock.scheduler.snapshot import GpuView, JobRequest, NodeView, Placement

__all__ = [  # this module's own, and those of ``node_state.py``, split from it
    "AnyGpu",
    "CycleState",
    "FitMemo",
    "GpuState",
    "MigState",
    "NodeState",
    "NodeStates",
    "ReservationError",
    "capacity_left",
    "left_after",
    "matches_model",
    "model_gpus",
    "model_name_matches",
    "usable_now",
]


class ReservationError(ValueError):
    """A picker chose GPUs that cannot hold the job; the capacity model is unchanged."""


class NodeStates(Mapping[str, NodeState]):
    """Every node's ``NodeState`` by name, each copied from its view on first access.

    Iterates in snapshot order. ``gpus_of`` reads a node's GPUs without
    copying them when it has not been accessed yet.
    """

    def __init__(self, views: Mapping[str, NodeView]) -> None:
        self._views = views
        self._states: dict[str, NodeState] = {}

    def __getitem__(self, name: str) -> NodeState:
        state = self._states.get(name)
        if state is None:
            state = self._states[name] = NodeState.from_view(self._views[name])
        return state

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    def gpus_of(self, name: str) -> Sequence[AnyGpu]:
        """The node's GPUs as they are now (its ``NodeState``'s once copied), in any order."""
        state = self._states.get(name)
        return self._views[name].gpus if state is None else state.gpus

    def free_cpus_of(self, name: str) -> float:
        """The node's ``NodeState.free_cpus``, without copying the node."""
        state = self._states.get(name)
        if state is not None:
            return state.free_cpus
        view = self._views[name]
        return 0.0 if view.cpus is None else view.cpus - view.used_cpus

    def free_host_memory_of(self, name: str) -> int:
        """The node's ``NodeState.free_host_memory``, without copying the node."""
        state = self._states.get(name)
        if state is not None:
            return state.free_host_memory
        view = self._views[name]
        return (view.host_memory or 0) - view.used_host_memory


T = TypeVar("T")

ViewFits = dict[int, tuple[tuple[GpuView, ...], NodeFit]]
"""``node_fit(gpus, ANY_MODEL)`` of snapshot GPU tuples, by ``id``; each entry keeps its tuple."""


UuidsSeen = dict[str, tuple[tuple[GpuView, ...], tuple[str, ...]]]
"""Each node's GPU tuple and its uuids, by node name (``CycleState.unique_uuids``)."""


@dataclass(slots=True)
class FitMemo:
    """What a ``CycleState`` keeps for the next cycle of the same caller (``SchedulerSession``).

    ``fits``: the summaries the latest cycle made of snapshot GPU tuples (by
    identity, each entry holding its tuple, so an id is never mistaken);
    ``uuids``: each node's GPU tuple and uuids, and whether they were unique.
    A new memo knows nothing: a cycle given one computes everything afresh.
    """

    fits: ViewFits = field(default_factory=dict)
    uuids: tuple[UuidsSeen, bool] = field(default_factory=lambda: ({}, True))


class CycleState:
    """Per-cycle capacity of every node, by name.

    ``reserve`` and ``hold`` take capacity, ``release`` gives a hold back; ``changes`` logs
    the name of every node they changed, in order, so readers can catch up on what
    changed since, and ``released`` counts the releases: while it stays the same,
    capacity only shrinks.
    ``views`` are the snapshot's nodes (never changed), by name.

    It also carries the cycle's plugin data (kube-scheduler's ``CycleState``): a
    pre-score plugin ``write``s what it computed once per cycle (share prices, a learned
    workload), before any job is tried; scorers and pickers ``read`` it. Nothing else
    writes it, and nothing written changes during the cycle.

    ``fit`` of a node not copied yet reuses the summary that the previous
    cycle given the same ``memo`` made of the very same GPU tuple (``FitMemo.fits``;
    snapshots are immutable, so the summary is the one ``node_fit`` would
    compute). A caller that keeps an unchanged node's ``NodeView`` from
    cycle to cycle (the simulator, ``benchmarks/scheduler_scale.py``) skips
    summarising it again; a fresh view costs one dictionary lookup. Only the
    latest cycle's summaries are kept, and no answer depends on them.
    Without a ``memo`` nothing is known and nothing kept.
    """

    def __init__(self, nodes: Iterable[NodeView], memo: FitMemo | None = None) -> None:
        self.views: dict[str, NodeView] = {}
        for view in nodes:
            if view.name in self.views:
                raise ValueError(f"node {view.name!r} appears twice in the snapshot")
            self.views[view.name] = view
        self.nodes = NodeStates(self.views)
        self.changes: list[str] = []
        self.released = 0
        self._fits: dict[str, NodeFit] = {}
        self._stale: dict[str, NodeFit] = {}  # fits of nodes changed since, to refit from
        self._unique_uuids: bool | None = None
        self._memo = memo if memo is not None else FitMemo()
        self._known = self._memo.fits  # the snapshot GPU tuples the last cycle fitted
        self._fitted: ViewFits = {}  # those this cycle fits, for the next one
        self._memo.fits = self._fitted
        self._data: dict[type, object] = {}

    def write(self, value: object) -> None:
        """Record this cycle's ``value``, under its type (a pre-score plugin, before step 2
        ends; a second value of the same type replaces the first)."""
        self._data[type(value)] = value

    def read(self, kind: type[T]) -> T | None:
        """This cycle's value of type ``kind``, or None when no plugin wrote one."""
        found = self._data.get(kind)
        return found if isinstance(found, kind) else None

    @property
    def unique_uuids(self) -> bool:
        """True when no two GPUs of the snapshot share a uuid (as the store guarantees).

        The previous answer stands when every node lists the same uuids, in
        order, as when it was found (``FitMemo.uuids``: each node's GPU
        tuple, checked by identity, and its uuids); a node with another GPU
        tuple costs one comparison of its uuids.
        """
        if self._unique_uuids is None:
            known, answer = self._memo.uuids
            same = len(known) == len(self.views)
            seen: UuidsSeen = {}
            for name, view in self.views.items():
                gpus = view.gpus
                entry = known.get(name)
                if entry is not None and entry[0] is gpus:
                    seen[name] = entry
                    continue
                uuids = tuple([g.uuid for g in gpus])
                seen[name] = (gpus, uuids)
                if entry is None or entry[1] != uuids:
                    same = False
            if not same:
                count = sum(len(uuids) for _, uuids in seen.values())
                answer = len({u for _, uuids in seen.values() for u in uuids}) == count
            self._memo.uuids = (seen, answer)
            self._unique_uuids = answer
        return self._unique_uuids

    def fit(self, name: str) -> NodeFit:
        """``index.node_fit`` of the node's GPUs as they are now (``ANY_MODEL``); memoized.

        A change to the node (``reserve``, ``hold``, ``release``) refits it on next read.
        """
        fit = self._fits.get(name)
        if fit is None:
            old = self._stale.pop(name, None)
            gpus = self.nodes.gpus_of(name)
            if old is None and gpus is self.views[name].gpus:  # the snapshot's, not copied
                fit = self._snapshot_fit(gpus)
            elif old is None:
                fit = node_fit(gpus, ANY_MODEL)
            else:
                node = self.nodes[name]  # copied already: it changed
                fit = refit(old, node.gpus, node.idle_gpus, node.free_memory)
            self._fits[name] = fit
        return fit

    def fit_all(self) -> list[NodeFit]:
        """``fit`` of every node, in snapshot order: the same summaries, in one pass (the
        catalog reads every node once per cycle, most of them not copied yet)."""
        fits, copied = self._fits, self.nodes._states
        out: list[NodeFit] = []
        for name, view in self.views.items():
            fit = fits.get(name)
            if fit is None:
                if name in copied:  # it may have changed: the general case
                    fit = self.fit(name)
                else:  # ``fit`` of a node still the snapshot's, without its lookups
                    fit = fits[name] = self._snapshot_fit(view.gpus)
            out.append(fit)
        return out

    def _snapshot_fit(self, gpus: tuple[GpuView, ...]) -> NodeFit:
        """``node_fit(gpus, ANY_MODEL)`` of a snapshot's GPU tuple, the last cycle's when it
        fitted this very tuple; recorded for the next cycle."""
        key = id(gpus)
        known = self._known.get(key)
        fit = known[1] if known is not None and known[0] is gpus else node_fit(gpus, ANY_MODEL)
        self._fitted[key] = (gpus, fit)
        return fit

    def _changed(self, name: str) -> None:
        self.changes.append(name)
        fit = self._fits.pop(name, None)
        if fit is not None:
            self._stale[name] = fit

    def reserve(self, job: JobRequest, node_name: str, gpu_indices: Sequence[int]) -> Placement:
        """Take ``gpu_indices`` on ``node_name`` for ``job`` and return the Placement.

        Raises ``ReservationError`` (changing nothing) unless the GPUs are
        distinct, exist, are usable now by the job (``usable_now``), and number
        exactly ``job.gpus``, and, for a MIG job, the node has a free MIG device of
        its profile (taken here; ``Placement.mig``).
        """
        node = self.nodes[node_name]
        chosen = _gpus_at(node.gpus, gpu_indices)
        if len(set(gpu_indices)) != job.gpus or len(chosen) != job.gpus:
            raise ReservationError(
                f"job {job.id} needs {job.gpus} distinct GPUs on {node_name}, "
                f"got indices {list(gpu_indices)}"
            )
        for gpu in chosen:
            if not usable_now(job, gpu):
                raise ReservationError(f"job {job.id} does not fit GPUs {list(gpu_indices)}")
        device = _free_mig(job, node) if job.mig is not None else None
        if job.cpus and node.cpus is not None:
            if job.cpus > node.free_cpus + 1e-9:
                raise ReservationError(
                    f"job {job.id} needs {job.cpus:g} CPUs; node {node_name} has "
                    f"{node.free_cpus:g} free"
                )
            node.free_cpus -= job.cpus
        if job.memory and node.host_memory is not None:
            node.free_host_memory -= job.memory  # ``memory_capacity`` checked it fits
        if device is not None:
            device.held = True
        share = self._take(job, node, chosen)
        mig = None if device is None else device.uuid
        return Placement(job.id, node_name, tuple([g.uuid for g in chosen]), share, mig)

    def hold(self, job: JobRequest, node_name: str, gpu_indices: Sequence[int]) -> None:
        """Keep GPUs for ``job`` without placing it (a preemptor waiting for its victims).

        Like ``reserve`` but for fewer GPUs than the job needs; GPUs it
        cannot use now are skipped. No Placement: the job stays pending, and
        later jobs of the cycle cannot take what it holds. A MIG job holds a free
        device of its profile, if the node has one (never given back: only the EASY
        reservation, which a MIG job never gets, ``release``s).
        """
        node = self.nodes[node_name]
        if job.mig is not None:
            device = next(
                (m for m in node.migs if m.profile == job.mig and m.healthy and not m.held), None
            )
            if device is not None:
                device.held = True
                self._changed(node_name)
        chosen = [g for g in _gpus_at(node.gpus, gpu_indices) if usable_now(job, g)]
        if chosen:
            self._take(job, node, chosen)

    def release(self, job: JobRequest, node_name: str, gpu_indices: Sequence[int]) -> None:
        """Undo a ``hold`` of exactly these GPUs for ``job`` (a hold never takes CPUs)."""
        node = self.nodes[node_name]
        share = job.gpu_memory if job.shared else None
        for gpu in _gpus_at(node.gpus, gpu_indices):
            if share is not None:
                gpu.used_memory -= share
                gpu.shared_jobs -= 1
            else:
                gpu.exclusive = False
                gpu.used_memory = 0
        node.refresh()
        self.released += 1
        self._changed(node.name)

    def _take(self, job: JobRequest, node: NodeState, chosen: Sequence[GpuState]) -> int | None:
        share = job.gpu_memory if job.shared else None
        idle, free = node.idle_gpus, node.free_memory
        for gpu in chosen:  # ``refresh`` of the GPUs taken: their part of the counters only
            if gpu.healthy and not gpu.exclusive:
                free -= gpu.memory_total - gpu.used_memory
                idle -= gpu.shared_jobs == 0 and gpu.used_memory == 0
            if share is not None:
                gpu.used_memory += share
                gpu.shared_jobs += 1
            else:
                gpu.exclusive = True
                gpu.used_memory = gpu.memory_total
            if gpu.healthy and not gpu.exclusive:
                free += gpu.memory_total - gpu.used_memory
                idle += gpu.shared_jobs == 0 and gpu.used_memory == 0
        node.idle_gpus, node.free_memory = idle, free
        self.changes.append(node.name)  # ``_changed``, inlined
        fit = self._fits.pop(node.name, None)
        if fit is not None:
            self._stale[node.name] = fit
        return share


def _free_mig(job: JobRequest, node: NodeState) -> MigState:
    """The node's first free MIG device of ``job.mig``'s profile (snapshot order: by parent
    GPU, then slot); ``ReservationError`` when it has none."""
    for device in node.migs:
        if device.profile == job.mig and device.healthy and not device.held:
            return device
    raise ReservationError(f"job {job.id} needs a free MIG {job.mig}; {node.name} has none")


def _gpus_at(gpus: tuple[GpuState, ...], indices: Sequence[int]) -> list[GpuState]:
    """The GPU with each of these indices (the last one, were an index repeated), in order.

    Unknown indices are left out. ``gpus`` is sorted by index, so GPU ``i``
    is usually at position ``i``.
    """
    chosen = []
    last = len(gpus) - 1
    for i in indices:
        if 0 <= i <= last and gpus[i].index == i and (i == last or gpus[i + 1].index != i):
            chosen.append(gpus[i])
        else:
            found = [g for g in gpus if g.index == i]
            chosen.extend(found[-1:])
    return chosen
