"""Default CPU and memory requests for jobs that set none (server config ``job_defaults``).

Applied once, at submit, and stored on the job: the scheduler counts them
against the node (``cpu_capacity``, ``memory_capacity``) and the container
gets them as its limits (``NanoCpus``, ``Memory``). So a flood of jobs that
ask for nothing queues on a node instead of swamping its host. ``null``
turns a default off: such jobs then take no CPUs (or memory) of the node,
and run without that limit.
"""

from __future__ import annotations

import math
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


def cpu_shortfall(gpus: int, cpus: float | None, defaults: JobDefaults) -> str | None:
    """One line when a node's ``cpus`` let fewer jobs that set no ``cpus`` run at once than
    it has ``gpus``, each taking ``defaults.cpus``; else None (also when the node or the
    defaults do not count CPUs). The server logs it at start, ``gpudock nodes`` shows it:
    ``8 GPUs but 2 CPUs: at most 2 one-GPU jobs at once (job_defaults.cpus is 1); set
    job_defaults.cpus or node.cpus``. Pure."""
    per_job = defaults.cpus
    if gpus <= 0 or cpus is None or per_job is None:
        return None
    at_once = math.floor(cpus / per_job + 1e-9)
    if at_once >= gpus:
        return None
    return (
        f"{gpus} GPUs but {cpus:g} CPUs: at most {at_once} one-GPU jobs at once "
        f"(job_defaults.cpus is {per_job:g}); set job_defaults.cpus or node.cpus"
    )
