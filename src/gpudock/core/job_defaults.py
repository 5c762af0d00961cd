"""Default CPU and memory requests for jobs that set none (server config ``job_defaults``).

Applied once, at submit, and stored on the job: the scheduler counts them
against the node (``cpu_capacity``, ``memory_capacity``) and the container
gets them as its limits (``NanoCpus``, ``Memory``). So a flood of jobs that
ask for nothing queues on a node instead of swamping its host. ``null``
turns a default off: such jobs then take no CPUs (or memory) of the node,
and run without that limit.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpudock.core.job import MIN_MEMORY, JobSpec
from gpudock.core.units import format_size, parse_size

DEFAULT_CPUS = 1.0
DEFAULT_MEMORY = 2 * 1024**3


class JobDefaults(BaseModel):
    """What a job gets for each of ``cpus`` and ``memory`` it leaves unset."""

    model_config = ConfigDict(extra="forbid")

    cpus: float | None = Field(
        default=DEFAULT_CPUS,
        gt=0,
        le=4096,
        allow_inf_nan=False,
        description="CPU cores; default 1; null: not counted, no limit",
    )
    memory: int | None = Field(
        default=DEFAULT_MEMORY,
        description="memory bytes (accepts '2GiB'); default 2GiB; null: not counted, no limit",
    )

    @field_validator("memory", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        if value is None:
            return None
        size = parse_size(value)
        if size < MIN_MEMORY:
            minimum = format_size(MIN_MEMORY)
            raise ValueError(f"memory must be at least {minimum} (Docker's minimum)")
        return size


def with_defaults(spec: JobSpec, defaults: JobDefaults) -> JobSpec:
    """``spec`` with ``defaults`` filled into its unset ``cpus`` and ``memory``; ``spec``
    itself when it sets both (or the defaults are off). Pure."""
    update: dict[str, object] = {}
    if spec.cpus is None and defaults.cpus is not None:
        update["cpus"] = defaults.cpus
    if spec.memory is None and defaults.memory is not None:
        update["memory"] = defaults.memory
    return spec.model_copy(update=update) if update else spec
