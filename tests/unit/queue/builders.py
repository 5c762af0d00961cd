"""Test kit for queues: fluent queue builders and resource shorthands.

queues = queue_set(
    make_queue("vision").cohort("research").guarantee(gpus=16).limit(gpus=24),
    make_queue("nlp").cohort("research").guarantee(gpus=8).no_borrow(),
    cohorts=["research"],
)
ledger = QuotaLedger(queues, gpus(32), {"vision": gpus(20)})
assert refused(ledger.check("vision", gpus(8))) == "queue vision would exceed ..."
"""

from __future__ import annotations

from typing import Any

from gpudock.core.units import parse_size
from gpudock.queue import Admission, QueueConfig, QueuesConfig, QueueSet, Resources

GiB = 2**30
Size = str | int


def gpus(n: float, memory: Size = 0, cpus: float = 0) -> Resources:
    """A resource vector: ``n`` GPU-equivalents, ``memory`` of GPU memory, ``cpus`` cores."""
    return Resources.of(gpus=n, gpu_memory=parse_size(memory), cpus=cpus)


def memory(size: Size) -> Resources:
    return Resources.of(gpu_memory=parse_size(size))


def cpus(n: float) -> Resources:
    return Resources.of(cpus=n)


class QueueBuilder:
    """Defaults: no cohort, weight 1, no guarantee, no limit, borrows and lends."""

    def __init__(self, name: str) -> None:
        self._fields: dict[str, Any] = {"name": name, "guarantee": {}, "limit": {}}

    def cohort(self, cohort: str) -> QueueBuilder:
        self._fields["cohort"] = cohort
        return self

    def weight(self, weight: float) -> QueueBuilder:
        self._fields["weight"] = weight
        return self

    def guarantee(self, **quota: Any) -> QueueBuilder:
        self._fields["guarantee"] = quota
        return self

    def limit(self, **quota: Any) -> QueueBuilder:
        self._fields["limit"] = quota
        return self

    def no_borrow(self) -> QueueBuilder:
        self._fields["borrow"] = False
        return self

    def no_lend(self) -> QueueBuilder:
        self._fields["lend"] = False
        return self

    def build(self) -> QueueConfig:
        return QueueConfig.model_validate(self._fields)


def make_queue(name: str) -> QueueBuilder:
    return QueueBuilder(name)


def queues_config(*queues: QueueBuilder, cohorts: list[str] | None = None) -> QueuesConfig:
    return QueuesConfig(cohorts=cohorts or [], queues=[q.build() for q in queues])


def queue_set(*queues: QueueBuilder, cohorts: list[str] | None = None) -> QueueSet:
    return QueueSet.from_config(queues_config(*queues, cohorts=cohorts))


def refused(admission: Admission) -> str:
    """The refusal message; fails the test if the job was admitted."""
    assert not admission.admitted, "expected a refusal, the job was admitted"
    assert admission.reason is not None and admission.reason.layer == "quota"
    return admission.reason.message


def hint(admission: Admission) -> str | None:
    assert admission.reason is not None
    return admission.reason.counterfactual
