"""The queue report: one row per queue, for ``GET /v1/queues`` and ``gpudock queues``.

Pure: built from the queue set, capacity, each queue's load and the usage
history; ``to_dict`` gives JSON-safe plain numbers (GPUs and CPUs as floats,
GPU memory in bytes, unset limits as null).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpudock.queue.config import FairShareConfig
from gpudock.queue.fairshare import FairShare, entitlements
from gpudock.queue.history import UsageHistory
from gpudock.queue.model import Queue, QueueSet, capacity_warnings
from gpudock.queue.resources import RESOURCES, ZERO, Limits, Resource, Resources


@dataclass(frozen=True, slots=True)
class QueueLoad:
    """One queue's jobs: running usage (``job_usage`` summed) and pending demand.

    ``pending_demand`` sums the pending jobs' ``pending_usage``.
    """

    usage: Resources = field(default_factory=Resources)
    running_jobs: int = 0
    pending_jobs: int = 0
    pending_demand: Resources = field(default_factory=Resources)


@dataclass(frozen=True, slots=True)
class QueueReport:
    """One queue's standing.

    ``borrowed`` (above guarantee) and ``lendable`` (unused guarantee it
    lends) count only the resources quotas govern. ``fair_share`` is the
    entitlement; ``dominant_share`` the weighted DRF share of current usage
    and ``effective_share`` the fair-share ordering key (history included).
    """

    name: str
    cohort: str | None
    declared: bool
    weight: float
    borrow: bool
    lend: bool
    usage: Resources
    running_jobs: int
    pending_jobs: int
    guarantee: Resources
    limit: Limits
    borrowed: Resources
    lendable: Resources
    fair_share: Resources
    dominant_share: float
    effective_share: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cohort": self.cohort,
            "declared": self.declared,
            "weight": self.weight,
            "borrow": self.borrow,
            "lend": self.lend,
            "usage": self.usage.to_dict(),
            "running_jobs": self.running_jobs,
            "pending_jobs": self.pending_jobs,
            "guarantee": self.guarantee.to_dict(),
            "limit": self.limit.to_dict(),
            "borrowed": self.borrowed.to_dict(),
            "lendable": self.lendable.to_dict(),
            "fair_share": self.fair_share.to_dict(),
            "dominant_share": round(self.dominant_share, 6),
            "effective_share": round(self.effective_share, 6),
        }


@dataclass(frozen=True, slots=True)
class QueuesReport:
    """All queues (declared ones, then any others with jobs, by name) and the cluster."""

    capacity: Resources
    unguaranteed: Resources
    queues: tuple[QueueReport, ...]
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity.to_dict(),
            "unguaranteed": self.unguaranteed.to_dict(),
            "queues": [q.to_dict() for q in self.queues],
            "warnings": list(self.warnings),
        }


def build_report(
    queues: QueueSet,
    config: FairShareConfig,
    capacity: Resources,
    loads: Mapping[str, QueueLoad],
    history: UsageHistory | None = None,
) -> QueuesReport:
    """The report for every declared queue plus any undeclared queue in ``loads``."""
    names = [q.name for q in queues] + sorted(set(loads) - set(queues.queues))
    empty = QueueLoad()
    demand = {n: loads.get(n, empty).usage + loads.get(n, empty).pending_demand for n in names}
    fair = entitlements(queues, capacity, demand)
    shares = FairShare.build(queues, config, capacity, history)
    rows = tuple(
        _row(queues.get(n), loads.get(n, empty), fair[n], shares, queues.tracked) for n in names
    )
    warnings = tuple(capacity_warnings(queues, capacity))
    return QueuesReport(capacity, queues.unguaranteed(capacity), rows, warnings)


def _row(
    queue: Queue,
    load: QueueLoad,
    fair_share: Resources,
    shares: FairShare,
    tracked: frozenset[Resource],
) -> QueueReport:
    return QueueReport(
        name=queue.name,
        cohort=queue.cohort,
        declared=queue.declared,
        weight=queue.weight,
        borrow=queue.borrow,
        lend=queue.lend,
        usage=load.usage,
        running_jobs=load.running_jobs,
        pending_jobs=load.pending_jobs,
        guarantee=queue.guarantee,
        limit=queue.limit,
        borrowed=_only(queue.borrowed(load.usage), tracked),
        lendable=_only(queue.lendable(load.usage), tracked),
        fair_share=fair_share,
        dominant_share=shares.current_share(queue.name, load.usage),
        effective_share=shares.share(queue.name, load.usage),
    )


def _only(vector: Resources, tracked: frozenset[Resource]) -> Resources:
    """``vector`` with the resources outside ``tracked`` zeroed."""
    kept = [vector.get(r) if r in tracked else ZERO for r in RESOURCES]
    return Resources(*kept)
