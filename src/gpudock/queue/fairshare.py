"""Weighted dominant-resource fairness (DRF), the fair-share order, and entitlements.

Share of a queue ``q`` with weight ``w_q``, over resources ``r`` with
capacity ``C_r`` and resource weight ``rw_r`` (resources with ``C_r = 0``
or ``rw_r = 0`` are ignored)::

    effective_r = current_r + history_weight * decayed_average_r
    share(q)    = max_r (rw_r * effective_r / C_r) / w_q

``current`` includes the jobs admitted earlier in the same cycle, and
``decayed_average`` comes from ``UsageHistory``. With ``history_weight = 0``
this is Kueue's DRF on current usage alone. The queue with the lowest share
is the furthest below its fair share and is served first.

Entitlements (``entitlements``) are each queue's fair slice of the cluster,
per resource, by weighted water-filling (see ``water_fill``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Generic, TypeVar

from gpudock.queue.config import FairShareConfig
from gpudock.queue.history import ZERO_VECTOR, FloatVector, UsageHistory, as_floats
from gpudock.queue.model import QueueSet
from gpudock.queue.resources import RESOURCES, Resources, exact

J = TypeVar("J")
ZERO = Fraction(0)


def dominant_share(usage: FloatVector, capacity: FloatVector, weights: FloatVector) -> float:
    """``max_r weights_r * usage_r / capacity_r`` over resources with capacity and weight."""
    return max(
        (w * u / c for u, c, w in zip(usage, capacity, weights, strict=True) if c > 0 and w > 0),
        default=0.0,
    )


def effective_usage(current: FloatVector, history: FloatVector, weight: float) -> FloatVector:
    """``current + weight * history``, per resource."""
    a, b, c = (u + weight * h for u, h in zip(current, history, strict=True))
    return (a, b, c)


@dataclass(frozen=True, slots=True)
class FairShare:
    """Everything needed to compute shares, frozen for one cycle. Build with ``build``."""

    capacity: FloatVector
    resource_weights: FloatVector
    queue_weights: Mapping[str, float]
    history: Mapping[str, FloatVector]
    history_weight: float

    @classmethod
    def build(
        cls,
        queues: QueueSet,
        config: FairShareConfig,
        capacity: Resources,
        history: UsageHistory | None = None,
    ) -> FairShare:
        weights = config.resource_weights
        return cls(
            capacity=as_floats(capacity),
            resource_weights=(weights.gpus, weights.gpu_memory, weights.cpus),
            queue_weights={q.name: q.weight for q in queues},
            history=dict(history.averages) if history is not None else {},
            history_weight=config.history_weight,
        )

    def share(self, queue: str, usage: Resources) -> float:
        """The weighted dominant share of ``queue`` at ``usage``, history included."""
        past = self.history.get(queue, ZERO_VECTOR)
        effective = effective_usage(as_floats(usage), past, self.history_weight)
        return dominant_share(effective, self.capacity, self.resource_weights) / self.weight(queue)

    def current_share(self, queue: str, usage: Resources) -> float:
        """The weighted dominant share of ``usage`` alone (no history)."""
        share = dominant_share(as_floats(usage), self.capacity, self.resource_weights)
        return share / self.weight(queue)

    def weight(self, queue: str) -> float:
        """The queue's fair-share weight; 1 for a queue the config does not declare."""
        return self.queue_weights.get(queue, 1.0)


class FairShareOrder(Generic[J]):
    """Kueue's fair-share ordered iterator over per-queue job lists.

    Each ``next()`` yields the next job of the queue with the lowest
    ``FairShare.share`` at its *current* usage (read through ``usage``, e.g.
    ``QuotaLedger.usage``, so jobs admitted earlier this cycle count); ties
    go to the queue name. Within a queue jobs come in the given order. Every
    job is yielded once unless its queue is ``drop``ped.

    Contract: usage only grows during iteration (the cycle charges the
    admitted job's queue before asking for the next job). The yielded queue
    is re-queued on the next call, with the share its usage then has; a
    waiting queue whose usage changed meanwhile is re-keyed when popped. So
    each ``next()`` costs O(log queues) and about one share. Deterministic.
    """

    def __init__(
        self,
        jobs: Mapping[str, Sequence[J]],
        fair_share: FairShare,
        usage: Callable[[str], Resources],
    ) -> None:
        self._jobs = {name: list(queued) for name, queued in jobs.items() if queued}
        self._position = dict.fromkeys(self._jobs, 0)
        self._fair_share = fair_share
        self._usage = usage
        self._keyed_at: dict[str, Resources] = {}  # the usage each queued key was computed at
        self._heap: list[tuple[float, str]] = []
        self._last: str | None = None
        for name in self._jobs:
            self._push(name)

    def __iter__(self) -> Iterator[J]:
        return self

    def __next__(self) -> J:
        if self._last is not None:
            self._push(self._last)
            self._last = None
        name = self._pop_lowest()
        position = self._position[name]
        self._position[name] = position + 1
        if position + 1 < len(self._jobs[name]):
            self._last = name
        return self._jobs[name][position]

    def drop(self, queue: str) -> None:
        """Yield no more jobs of ``queue`` this cycle (e.g. its head hit a hard limit)."""
        if queue in self._position:
            self._position[queue] = len(self._jobs[queue])
        if self._last == queue:
            self._last = None

    def _push(self, name: str) -> None:
        usage = self._keyed_at[name] = self._usage(name)
        heapq.heappush(self._heap, (self._fair_share.share(name, usage), name))

    def _pop_lowest(self) -> str:
        """The queue with the lowest current share that still has jobs."""
        while self._heap:
            share, name = heapq.heappop(self._heap)
            if self._position[name] >= len(self._jobs[name]):
                continue  # dropped
            usage = self._usage(name)
            if usage is self._keyed_at[name] or self._fair_share.share(name, usage) == share:
                return name
            self._push(name)  # its share rose while it waited: re-key it
        raise StopIteration


# ── entitlements ───────────────────────────────────────────────────────────


@dataclass(frozen=True, slots=True)
class Claim:
    """One queue's claim on one resource: water rises at ``weight`` from ``floor`` to ``cap``."""

    weight: Fraction
    floor: Fraction
    cap: Fraction


def water_fill(capacity: Fraction, claims: Sequence[Claim]) -> list[Fraction]:
    """Weighted max-min fair split of ``capacity``: ``clamp(weight * level, floor, cap)``.

    ``level`` is the highest at which the sum stays within ``capacity``; when
    all caps fit everyone gets their cap. Floors are honoured, unless they
    alone exceed ``capacity``: then floors are scaled down in proportion. The
    sum never exceeds ``capacity`` and no claim exceeds its cap. Exact.
    """
    floors = sum((c.floor for c in claims), ZERO)
    if floors >= capacity:
        scale = capacity / floors if floors > 0 else ZERO
        return [c.floor * scale for c in claims]
    if sum((c.cap for c in claims), ZERO) <= capacity:
        return [c.cap for c in claims]
    level = _water_level(capacity, claims)
    return [min(c.cap, max(c.floor, c.weight * level)) for c in claims]


def _water_level(capacity: Fraction, claims: Sequence[Claim]) -> Fraction:
    """The level where the piecewise-linear fill reaches ``capacity`` (interpolated exactly)."""

    def filled(level: Fraction) -> Fraction:
        return sum((min(c.cap, max(c.floor, c.weight * level)) for c in claims), ZERO)

    low, at_low = ZERO, filled(ZERO)
    for point in sorted({b / c.weight for c in claims for b in (c.floor, c.cap)}):
        at_point = filled(point)
        if at_point >= capacity:
            return low + (capacity - at_low) * (point - low) / (at_point - at_low)
        low, at_low = point, at_point
    raise AssertionError("caps exceed capacity, so the fill must reach it")


def entitlements(
    queues: QueueSet, capacity: Resources, demand: Mapping[str, Resources]
) -> dict[str, Resources]:
    """Each queue's fair share of the cluster, per resource, by weighted water-filling.

    ``demand`` is what a queue would use if it could: running plus pending
    (``pending_usage``). A queue gets at least ``min(demand, guarantee)``,
    at most ``min(demand, limit)`` (``min(demand, guarantee)`` when it may
    not borrow), and between those the capacity rises like water in
    proportion to queue weights. Queues without demand get nothing. Cohorts
    do not matter here: this is the cluster-wide fair split, for reclaim and
    display. Entitlements sum to at most ``capacity`` and respect limits.
    """
    names = sorted(demand)
    result = {name: Resources() for name in names}
    for resource in RESOURCES:
        claims = []
        for name in names:
            queue, wanted = queues.get(name), Fraction(demand[name].get(resource))
            floor = min(wanted, Fraction(queue.guarantee.get(resource)))
            limit = queue.limit.get(resource)
            cap = min(wanted, Fraction(limit)) if limit is not None else wanted
            claims.append(
                Claim(Fraction(exact(queue.weight)), floor, cap if queue.borrow else floor)
            )
        shares = water_fill(Fraction(capacity.get(resource)), claims)
        for name, share in zip(names, shares, strict=True):
            result[name] = replace(result[name], **{resource: exact(share)})
    return result
