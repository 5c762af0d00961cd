"""Queues, quotas, cohorts, borrowing/lending and weighted DRF fair share.

A pure layer (no I/O, no clock: time is passed in) that the scheduling cycle
consults before placement, as Kueue admits workloads before kube-scheduler
places them. See ``README.md`` in this folder for the flow.
"""

from gpudock.queue.config import (
    DEFAULT_QUEUE,
    FairShareConfig,
    QueueConfig,
    QueuesConfig,
    QuotaConfig,
    ResourceWeights,
)
from gpudock.queue.fairshare import (
    Claim,
    FairShare,
    FairShareOrder,
    dominant_share,
    entitlements,
    water_fill,
)
from gpudock.queue.history import UsageHistory, decay_factor
from gpudock.queue.model import Queue, QueueSet, capacity_warnings
from gpudock.queue.never import NeverAdmitted, never_admitted
from gpudock.queue.quota import Admission, LendingBalance, QuotaLedger, check_admission
from gpudock.queue.report import QueueLoad, QueueReport, QueuesReport, build_report
from gpudock.queue.resources import (
    RESOURCES,
    Limits,
    Quantity,
    Resource,
    Resources,
    capacity_of,
    job_usage,
    mig_usage,
    pending_usage,
    request_usage,
)

__all__ = [
    "DEFAULT_QUEUE",
    "RESOURCES",
    "Admission",
    "Claim",
    "FairShare",
    "FairShareConfig",
    "FairShareOrder",
    "LendingBalance",
    "Limits",
    "NeverAdmitted",
    "Quantity",
    "Queue",
    "QueueConfig",
    "QueueLoad",
    "QueueReport",
    "QueueSet",
    "QueuesConfig",
    "QueuesReport",
    "QuotaConfig",
    "QuotaLedger",
    "Resource",
    "ResourceWeights",
    "Resources",
    "UsageHistory",
    "build_report",
    "capacity_of",
    "capacity_warnings",
    "check_admission",
    "decay_factor",
    "dominant_share",
    "entitlements",
    "job_usage",
    "mig_usage",
    "never_admitted",
    "pending_usage",
    "request_usage",
    "water_fill",
]
