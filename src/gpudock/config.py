"""Server configuration, loaded from YAML by ``gpudock server --config``.

Every field has a safe default; unknown keys are rejected so typos surface.
Example::

    executor:
      pids_limit: 4096
      default_memory: 16GiB
      allowed_mounts: [/datasets, /scratch]
    scheduler:
      placement: binpack
      queues:
        cohorts: [research]
        queues:
          - {name: vision, cohort: research, weight: 2, guarantee: {gpus: 16}, limit: {gpus: 32}}
          - {name: nlp, cohort: research, guarantee: {gpus: 8}, borrow: false}
        fair_share: {half_life: 7d}
    reconcile_interval: 10s
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from gpudock.core.errors import InvalidInput
from gpudock.core.units import parse_duration, parse_size
from gpudock.queue.config import QueuesConfig


class ExecutorConfig(BaseModel):
    """Hardened container defaults. Admins may relax them here, users never can."""

    model_config = ConfigDict(extra="forbid")

    docker_url: str | None = Field(
        default=None, description="Docker Engine URL; default: DOCKER_HOST or the local socket"
    )
    cap_drop_all: bool = True
    cap_add: list[str] = Field(default_factory=list)
    no_new_privileges: bool = True
    init: bool = True
    pids_limit: int = Field(default=4096, gt=0)
    read_only_rootfs: bool = False
    default_cpus: float | None = Field(default=None, gt=0)
    default_memory: int | None = None
    allowed_mounts: list[str] = Field(
        default_factory=list, description="host path prefixes users may bind-mount"
    )
    gpu_mode: Literal["auto", "device-request", "env"] = Field(
        default="auto",
        description=(
            "how GPUs reach the container: NVIDIA device requests, env only, or auto "
            "(device requests; env only when the GPUs are emulated and Docker has no "
            "NVIDIA driver)"
        ),
    )
    stop_grace: float = Field(default=10.0, ge=0)
    pull_timeout: float = Field(default=300.0, gt=0)
    log_dir: str | None = Field(default=None, description="default: $GPUDOCK_HOME/logs")

    @field_validator("default_memory", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return None if value is None else parse_size(value)

    @field_validator("stop_grace", "pull_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value)

    @field_validator("allowed_mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path.startswith("/"):
                raise ValueError(f"allowed mount {path!r} must be an absolute path")
        return [p.rstrip("/") or "/" for p in value]


class PriorityClass(BaseModel):
    """A named priority: jobs naming it get ``value``; ``preempt`` lets them preempt."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")
    value: int = Field(ge=-1_000_000, le=1_000_000)
    preempt: bool = True
    description: str = ""


class ScorerWeight(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    weight: float = Field(default=1.0, gt=0)


class PoliciesConfig(BaseModel):
    """Which registered policies run (``gpudock.scheduler.registry``); unset = default.

    Names are checked against the registry when the server starts.
    """

    model_config = ConfigDict(extra="forbid")

    order: str | None = None
    filters: list[str] | None = Field(default=None, description="run in this order")
    scorers: list[ScorerWeight] | None = Field(
        default=None, description="summed with their weights; default: `placement` with 1"
    )
    picker: str | None = None


class SchedulerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    placement: Literal["binpack", "spread"] = "binpack"
    priority_classes: list[PriorityClass] = Field(default_factory=list)
    policies: PoliciesConfig = Field(default_factory=PoliciesConfig)
    queues: QueuesConfig = Field(
        default_factory=QueuesConfig,
        description="declared queues, cohorts and fair share; none declared: no quotas",
    )

    @field_validator("priority_classes")
    @classmethod
    def _unique(cls, value: list[PriorityClass]) -> list[PriorityClass]:
        names = [c.name for c in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"priority class names must be unique; repeated: {', '.join(dupes)}")
        return value

    def priority_class(self, name: str) -> PriorityClass | None:
        return next((c for c in self.priority_classes if c.name == name), None)


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    node_name: str | None = Field(default=None, description="default: the host name")
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    reconcile_interval: float = Field(default=5.0, gt=0)
    schedule_interval: float = Field(default=2.0, gt=0)

    @field_validator("reconcile_interval", "schedule_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value)


def load_config(path: str | Path | None) -> ServerConfig:
    """Read a YAML config file; raise ``InvalidInput`` with the failing key."""
    if path is None:
        return ServerConfig()
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except OSError as exc:
        raise InvalidInput(f"cannot read config {file}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise InvalidInput(f"config {file} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise InvalidInput(f"config {file} must be a mapping at the top level")
    try:
        return ServerConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"config {file}: {format_validation_error(exc)}") from exc


def format_validation_error(exc: ValidationError) -> str:
    """One line per error: ``field.path: message``."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(root)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"{loc}: {msg.removeprefix('Value error, ')}")
    return "; ".join(lines)
