"""The kinds of event the durable event log records (``GET /v1/events``).

Each event is written in the same database transaction as the change it
records; its integer id grows monotonically and is the paging cursor.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpudock.core.units import parse_duration


class EventType(StrEnum):
    """What an event records. Payload keys are listed per type in ``docs/api.md``."""

    JOB_STATE = "job.state"  # a state change: from, to, reason, attempt
    JOB_PLACED = "job.placed"  # the scheduler's placement committed: node, gpus, memory_per_gpu
    JOB_PREEMPTED = "job.preempted"  # a victim asked to stop: preemptor id, user, queue, class
    JOB_WATCHDOG_KILL = "job.watchdog_kill"  # stopped: max_runtime, GPU memory or a GPU fault
    JOB_RESIZED = "job.resized"  # an elastic job restarted to grow: from, to (GPUs)
    JOB_CHANGED = "job.changed"  # held, released, requeued or updated by a user: action, by
    NODE_HEALTH = "node.health"  # a node's status changed: status, reason
    GPU_HEALTH = "gpu.health"  # a GPU's health changed: uuid, index, from, to, reason
    GPU_FAULT = "gpu.fault"  # an XID or ECC event, or a lost GPU: uuid, kind, class, code
    GPU_STRAY = "gpu.stray_process"  # a process of no job on a job's GPU: uuid, pid, used
    NODE_LOST = "node.lost"  # a node away past its grace: jobs, watched (requeued or waiting)
    NODE_FENCED = "node.fenced"  # its agent stopped stale containers, or confirmed none: killed
    CONFIG_APPLIED = "config.applied"  # admin apply or SIGHUP: version, by, source, changes

    @property
    def is_job(self) -> bool:
        return self.value.startswith("job.")


class EventsConfig(BaseModel):
    """``events:`` in the server config: how long the event log keeps events.

    The controller prunes at most every ``prune_interval``, in its own short
    transaction: events older than ``max_age`` go, then all but the newest
    ``max_count``. ``null`` turns a bound off. Event ids are never reused.
    """

    model_config = ConfigDict(extra="forbid")

    max_age: float | None = Field(default=30 * 86400.0, gt=0, description="default 30d")
    max_count: int | None = Field(default=None, ge=1)
    prune_interval: float = Field(default=300.0, gt=0, description="default 5m")

    @field_validator("max_age", "prune_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)
