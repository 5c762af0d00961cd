"""``gpus:`` in the server (and node agent) config: the node-side GPU work.

Example::

    gpus:
      watchdog: {interval: 0.5s, grace: 1s, kill_strays: false}
      health: {events: true, poll_interval: 5s, on_fault: requeue, xid_classes: {43: gpu_reset}}
      mps: {pipe_dir: /tmp/nvidia-mps, log_dir: /var/log/nvidia-mps}

Every field has a default; unknown keys are refused, as everywhere in the config.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from gpudock.core.units import parse_duration
from gpudock.gpus.xid import FaultClass


class WatchdogConfig(BaseModel):
    """The GPU-memory watchdog (``gpus/watchdog.py``); always on where NVML is."""

    model_config = ConfigDict(extra="forbid")

    interval: float = Field(
        default=0.5, gt=0, le=0.5, description="seconds between passes; at most 0.5s"
    )
    grace: float = Field(
        default=1.0, ge=0, le=30, description="SIGTERM to SIGKILL for a job over its limit"
    )
    kill_strays: bool = Field(
        default=False,
        description="kill (SIGKILL) a process of no gpudock job on a GPU a job holds; "
        "default: report it only",
    )

    @field_validator("interval", "grace", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value)


class HealthConfig(BaseModel):
    """XID and ECC events (``gpus/xid.py``)."""

    model_config = ConfigDict(extra="forbid")

    events: bool = Field(default=True, description="subscribe to NVML events; false: poll only")
    poll_interval: float = Field(
        default=5.0, gt=0, description="how often GPUs without events are polled"
    )
    on_fault: Literal["requeue", "fail"] = Field(
        default="requeue",
        description="what happens to the jobs of a quarantined GPU: requeued (no retry "
        "used) or failed (their retries may requeue them)",
    )
    xid_classes: dict[int, FaultClass] = Field(
        default_factory=dict,
        description="XID -> application | gpu_reset | node | info, over the built-in catalog",
    )

    @field_validator("poll_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value)


class MpsConfig(BaseModel):
    """Where this node's MPS control daemon keeps its pipes and logs."""

    model_config = ConfigDict(extra="forbid")

    pipe_dir: str = Field(default="/tmp/nvidia-mps", description="CUDA_MPS_PIPE_DIRECTORY")
    log_dir: str = Field(default="/var/log/nvidia-mps", description="CUDA_MPS_LOG_DIRECTORY")

    @field_validator("pipe_dir", "log_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/") or ":" in value:
            raise ValueError(f"{value!r} must be an absolute path without ':'")
        return value.rstrip("/") or "/"


class GpuNodeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    watchdog: WatchdogConfig = Field(default_factory=WatchdogConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    mps: MpsConfig = Field(default_factory=MpsConfig)
