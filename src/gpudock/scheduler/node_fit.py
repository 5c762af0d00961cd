"""``NodeFit``: one node's capacity for one GPU-model class, in the few numbers policies read.

A *model class* is the set of GPU product names one model constraint matches
(a ``frozenset``), or ``ANY_MODEL`` for jobs without one. ``CycleState.fit``
(``capacity.py``) keeps each node's ``ANY_MODEL`` fit current as the cycle
reserves; the capacity index (``accel/index.py``) buckets nodes by their fits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple, Protocol

ModelClass = frozenset[str] | None
ANY_MODEL: ModelClass = None

WholeKey = tuple[int, int, int]  # (GPUs of the class, idle ones, idle GPUs on the node)
GpuKey = tuple[int, ...]
"""``(memory_total, free bytes)`` of a GPU shares may use. Typed as a tuple of any length so
that compiled code passes the objects as they are: it unboxes a fixed-length tuple into
its fields and boxes it again (a new tuple and ints) wherever it is used as a dict key."""


class GpuLike(Protocol):
    """What a summary reads of a GPU: a ``GpuView`` or a ``GpuState``."""

    @property
    def name(self) -> str: ...
    @property
    def memory_total(self) -> int: ...
    @property
    def used_memory(self) -> int: ...
    @property
    def exclusive(self) -> bool: ...
    @property
    def shared_jobs(self) -> int: ...
    @property
    def healthy(self) -> bool: ...


class NodeFit(NamedTuple):
    """One node's capacity for one model class, as the built-in policies see it.

    ``total``: GPUs of the class, healthy or not; ``idle``: healthy idle ones
    (``GpuState.idle``); ``frees``: free memory of each healthy GPU of the
    class not held exclusively, largest first; ``sizes``: memory of each GPU
    of the class, largest first. ``idle_all`` and ``free_all`` are the whole
    node's ``NodeState.idle_gpus`` and ``free_memory`` (what scorers read).
    ``only_name``: the product name when all the node's GPUs share one.
    ``shares``: ``(memory_total, free)`` of each healthy GPU of the class not held
    exclusively, in GPU order (``pricing.Pair``: what share prices read).
    """

    total: int
    idle: int
    frees: tuple[int, ...]
    sizes: tuple[int, ...]
    idle_all: int
    free_all: int
    only_name: str | None
    shares: tuple[GpuKey, ...] = ()

    @property
    def whole_key(self) -> WholeKey:
        """Its bucket for whole-GPU jobs: ``(total, idle, idle_all)``."""
        return (self.total, self.idle, self.idle_all)

    def shared_level(self, gpus: int) -> int | None:
        """The largest share that ``gpus`` GPUs of the class can each take now; None: none can.

        ``GpuCapacity`` passes a shared job of ``gpus`` GPUs and share ``s``
        iff ``gpus`` GPUs have ``s`` free now and ``gpus`` GPUs have at least
        ``s`` in all: iff ``s <= shared_level(gpus)``.
        """
        if len(self.frees) < gpus:
            return None
        free, size = self.frees[gpus - 1], self.sizes[gpus - 1]
        return free if free < size else size


_fit = tuple.__new__
"""``NodeFit(*fields)`` without the Python-level ``__new__`` of a named tuple (hot paths)."""


def node_fit(gpus: Iterable[GpuLike], members: ModelClass) -> NodeFit:
    """Summarise one node's GPUs for one model class (``ANY_MODEL``: all of them)."""
    if members is None:
        return _any_fit(gpus)
    total = idle = idle_all = free_all = 0
    frees: list[int] = []
    sizes: list[int] = []
    pairs: list[GpuKey] = []
    names: set[str] = set()
    for g in gpus:
        names.add(g.name)
        shareable = g.healthy and not g.exclusive
        is_idle = shareable and g.shared_jobs == 0 and g.used_memory == 0
        free = g.memory_total - g.used_memory
        idle_all += is_idle
        if shareable:
            free_all += free
        if g.name in members:
            total += 1
            idle += is_idle
            sizes.append(g.memory_total)
            if shareable:
                frees.append(free)
                pairs.append((g.memory_total, free))
    frees.sort(reverse=True)
    sizes.sort(reverse=True)
    only = next(iter(names)) if len(names) == 1 else None
    return NodeFit(total, idle, tuple(frees), tuple(sizes), idle_all, free_all, only, tuple(pairs))


def _any_fit(gpus: Iterable[GpuLike]) -> NodeFit:
    """``node_fit(gpus, ANY_MODEL)``: the same sums, in the loop every cycle runs per node."""
    idle = free_all = 0
    frees: list[int] = []
    sizes: list[int] = []
    pairs: list[GpuKey] = []
    first: str | None = None
    only = True
    for g in gpus:
        if first is None:
            first = g.name
        elif only and g.name != first:
            only = False
        size = g.memory_total
        sizes.append(size)
        if g.healthy and not g.exclusive:
            used = g.used_memory
            frees.append(size - used)
            pairs.append((size, size - used))
            free_all += size - used
            if g.shared_jobs == 0 and used == 0:
                idle += 1
    frees.sort(reverse=True)
    sizes.sort(reverse=True)
    name = first if only else None
    return _fit(
        NodeFit,
        (len(sizes), idle, tuple(frees), tuple(sizes), idle, free_all, name, tuple(pairs)),
    )


def refit(old: NodeFit, gpus: Iterable[GpuLike], idle_all: int, free_all: int) -> NodeFit:
    """``node_fit(gpus, ANY_MODEL)`` after a reservation changed the node, given ``old``.

    Reservations change no GPU's name or size, so ``total``, ``sizes`` and
    ``only_name`` carry over; ``idle_all`` and ``free_all`` are the node's
    refreshed ``NodeState`` counters.
    """
    pairs = tuple(
        (g.memory_total, g.memory_total - g.used_memory)
        for g in gpus
        if g.healthy and not g.exclusive
    )
    frees = [free for _, free in pairs]
    frees.sort(reverse=True)
    fields = (old.total, idle_all, tuple(frees), old.sizes, idle_all, free_all, old.only_name)
    return _fit(NodeFit, (*fields, pairs))


def class_fit(base: NodeFit, gpus: Iterable[GpuLike], members: ModelClass) -> NodeFit:
    """``node_fit(gpus, members)``, reusing ``base`` (the ``ANY_MODEL`` fit) when it is the same."""
    if members is None:
        return base
    if base.only_name is not None or base.total == 0:  # one product name, or no GPUs
        if base.only_name in members:
            return base
        return NodeFit(0, 0, (), (), base.idle_all, base.free_all, base.only_name)
    return node_fit(gpus, members)
