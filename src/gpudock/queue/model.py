"""The resolved queue model: ``Queue`` and ``QueueSet``, built from ``QueuesConfig``.

Lending happens within a *lending group*: a cohort, or a queue alone when it
has no cohort. Which resources quotas govern is ``QueueSet.tracked``: those
named in some queue's guarantee or limit. A resource nobody puts a quota on
(CPUs, usually) is never checked at admission, though fair share still
counts it; with no queues declared, nothing is checked at all.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from gpudock.queue.config import DEFAULT_QUEUE, QueueConfig, QueuesConfig, QuotaConfig
from gpudock.queue.resources import (
    RESOURCES,
    Limits,
    Quantity,
    Resource,
    Resources,
    amount,
    exact,
    total,
)


@dataclass(frozen=True, slots=True)
class Queue:
    """One queue with exact quotas. ``declared`` is False for a name no config mentions."""

    name: str
    cohort: str | None = None
    weight: float = 1.0
    guarantee: Resources = field(default_factory=Resources)
    limit: Limits = field(default_factory=Limits)
    borrow: bool = True
    lend: bool = True
    declared: bool = True

    @classmethod
    def from_config(cls, config: QueueConfig) -> Queue:
        return cls(
            name=config.name,
            cohort=config.cohort,
            weight=config.weight,
            guarantee=_guarantee(config.guarantee),
            limit=_limits(config.limit),
            borrow=config.borrow,
            lend=config.lend,
        )

    @property
    def group(self) -> str:
        """The lending group key: the cohort's name, or ``queue <name>`` when alone."""
        return self.cohort if self.cohort is not None else f"queue {self.name}"

    def borrowed(self, usage: Resources) -> Resources:
        """How much of ``usage`` is above the guarantee: ``max(0, usage - guarantee)``."""
        return (usage - self.guarantee).positive()

    def lendable(self, usage: Resources) -> Resources:
        """Unused guarantee others in the cohort may borrow (zero unless ``lend``)."""
        return (self.guarantee - usage).positive() if self.lend else Resources()


def _guarantee(config: QuotaConfig) -> Resources:
    return Resources.of(config.gpus or 0, config.gpu_memory or 0, config.cpus or 0)


def _limits(config: QuotaConfig) -> Limits:
    def cap(value: float | int | None) -> Quantity | None:
        return None if value is None else exact(value)

    return Limits(cap(config.gpus), cap(config.gpu_memory), cap(config.cpus))


@dataclass(frozen=True, slots=True)
class QueueSet:
    """All queues by name, ``default`` included, and the resources quotas govern."""

    queues: Mapping[str, Queue]
    tracked: frozenset[Resource] = frozenset()

    @classmethod
    def from_config(cls, config: QueuesConfig) -> QueueSet:
        """Resolve the config; adds ``default`` (no cohort, guarantee 0, unlimited) if missing."""
        queues = {q.name: Queue.from_config(q) for q in config.queues}
        queues.setdefault(DEFAULT_QUEUE, Queue(DEFAULT_QUEUE))
        tracked = {r for q in config.queues for r in (*q.guarantee.named(), *q.limit.named())}
        return cls(dict(sorted(queues.items())), frozenset(tracked))

    def __iter__(self) -> Iterator[Queue]:
        """Queues in name order."""
        return iter(self.queues.values())

    def get(self, name: str) -> Queue:
        """The queue called ``name``, or an undeclared stand-in (no guarantee, no cohort)."""
        queue = self.queues.get(name)
        return queue if queue is not None else Queue(name, declared=False)

    def total_guarantee(self) -> Resources:
        return total(q.guarantee for q in self)

    def unguaranteed(self, capacity: Resources) -> Resources:
        """Capacity no queue is guaranteed, lent to any borrower: ``max(0, C - sum g)``."""
        return (capacity - self.total_guarantee()).positive()


def capacity_warnings(queues: QueueSet, capacity: Resources) -> list[str]:
    """Human warnings about quotas the cluster cannot honour; empty when all is well.

    Guarantees above capacity are not an error (nodes come and go), but not
    every guarantee can then be met at once. Call it at startup and whenever
    capacity changes; the report carries the result.
    """
    warnings: list[str] = []
    guaranteed = queues.total_guarantee()
    for resource in RESOURCES:
        if resource in queues.tracked and guaranteed.get(resource) > capacity.get(resource):
            parts = ", ".join(
                f"{q.name} {amount(resource, q.guarantee.get(resource))}"
                for q in queues
                if q.guarantee.get(resource) > 0
            )
            warnings.append(
                f"queues guarantee {amount(resource, guaranteed.get(resource))} in total but "
                f"the cluster has {amount(resource, capacity.get(resource))} ({parts}): "
                "not every guarantee can be honoured at once"
            )
    warnings.extend(_unusable_resources(queues))
    return warnings


def _unusable_resources(queues: QueueSet) -> Iterator[str]:
    """Queues that may not borrow a governed resource they have no guarantee of."""
    for queue in queues:
        for resource in sorted(queues.tracked, key=RESOURCES.index):
            if not queue.borrow and queue.guarantee.get(resource) == 0:
                yield (
                    f"queue {queue.name} may not borrow and has no {resource} guarantee: "
                    f"its jobs that use {resource} are never admitted"
                )
