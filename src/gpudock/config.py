"""Server configuration, loaded from YAML by ``gpudock server --config``.

Every field has a safe default; unknown keys are rejected so typos surface.
Example::

    node_name: gpu-07
    node:
      labels: {gpu.family: hopper, zone: rack-3}
      taints: ["reserved=training:NoSchedule"]
      cpus: 96                 # cores jobs may request here; unset: the host's
      memory: 512GiB           # memory jobs may request here; unset: the host's
      gpu_memory_reserve: 512MiB   # of each GPU, never given to memory shares
      topology:                # declared GPU topology; overrides what NVML reports
        nvlink: [[0, 1, 2, 3], [4, 5, 6, 7]]
        numa: [[0, 1, 2, 3], [4, 5, 6, 7]]
    executor:
      pids_limit: 4096
      default_memory: 16GiB
      allowed_mounts: ["/datasets:ro", "/scratch:rw"]   # plain path: read-only
      user: "1000:1000"        # run every container as this non-root uid:gid
      sharing: auto            # exclusive | mps | time-slice; auto: mps if its daemon runs
      registries:              # logins every user's pulls use; the password is in a file
        registry.example.com: {username: puller, password_file: /etc/gpudock/registry.pw}
    scheduler:
      placement: binpack
      queueing: [borrow-last]  # add strict-fifo for head-of-line blocking per queue
      never_fits: refuse       # or pending: a job no node could run waits for a node
      queues:
        cohorts: [research]
        queues:
          - {name: vision, cohort: research, weight: 2, guarantee: {gpus: 16}, limit: {gpus: 32}}
          - {name: nlp, cohort: research, guarantee: {gpus: 8}, borrow: false}
        fair_share: {half_life: 7d}
    gpus:                      # node-side GPU work (gpus/config.py)
      watchdog: {interval: 0.5s, grace: 1s}
      health: {on_fault: requeue}
    job_defaults: {cpus: 1, memory: 2GiB}   # for jobs that set none (the defaults)
    reconcile_interval: 10s
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpudock.core.affinity import Taint, Topology, check_label, parse_taint
from gpudock.core.errors import InvalidInput
from gpudock.core.events import EventsConfig
from gpudock.core.gpu_env import check_container_user, parse_capabilities
from gpudock.core.inventory import DEFAULT_GPU_MEMORY_RESERVE, NodeTraits
from gpudock.core.job_defaults import JobDefaults
from gpudock.core.mounts import AllowedMount, parse_allowlist
from gpudock.core.registries import ConfiguredLogin, check_registries
from gpudock.core.spec_schema import Flag, Integer, Number
from gpudock.core.units import parse_duration, parse_size
from gpudock.docfile import DocumentError, load_document
from gpudock.gpus.config import GpuNodeConfig
from gpudock.queue.config import QueuesConfig
from gpudock.queue.strategies import DEFAULT as DEFAULT_QUEUEING
from gpudock.queue.strategies import strategies


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
    allowed_mounts: list[AllowedMount] = Field(
        default_factory=list,
        description="host path prefixes users may bind-mount: 'PATH[:ro|rw]' (default ro), "
        "or {PATH: ro|rw}",
    )
    user: str | None = Field(
        default=None,
        description="run every container as this non-root 'uid:gid'; default: the image's user",
    )
    allow_swap: bool = Field(
        default=False, description="false: a job's memory limit is also its memory+swap limit"
    )
    log_max_size: int = Field(default=50 * 1024 * 1024, gt=0, description="Docker log file size")
    log_max_files: int = Field(default=3, ge=1, description="Docker log files kept per container")
    driver_capabilities: str = Field(
        default="compute,utility",
        description="NVIDIA_DRIVER_CAPABILITIES every job gets; users may only narrow it",
    )
    gpu_mode: Literal["auto", "device-request", "env"] = Field(
        default="auto",
        description=(
            "how GPUs reach the container: NVIDIA device requests, env only, or auto "
            "(device requests; env only when the GPUs are emulated and Docker has no "
            "NVIDIA driver)"
        ),
    )
    sharing: Literal["auto", "exclusive", "mps", "time-slice"] = Field(
        default="auto",
        description=(
            "how jobs share a GPU here: exclusive (no memory shares), mps (an MPS control "
            "daemon runs: limits held by the driver), time-slice (shares take turns; memory "
            "watched by the watchdog); auto: mps when its daemon answers, else time-slice"
        ),
    )
    stop_grace: float = Field(default=10.0, ge=0)
    pull_timeout: float = Field(default=300.0, gt=0)
    call_timeout: float = Field(
        default=30.0,
        gt=0,
        description="the most any engine call may take (a stop: stop_grace more; "
        "a launch: pull_timeout more)",
    )
    inspect_timeout: float = Field(
        default=10.0, gt=0, description="the most a ping or describing one container may take"
    )
    log_dir: str | None = Field(default=None, description="default: $GPUDOCK_HOME/logs")
    mount_staging_dir: str | None = Field(
        default=None,
        description="where bind sources are staged for Docker (a folder only gpudock's user "
        "may change); default: $GPUDOCK_HOME/mounts",
    )
    registries: dict[str, ConfiguredLogin] = Field(
        default_factory=dict,
        description="logins every user's pulls use: {HOST[:PORT]: {username, password_file}}",
    )

    @field_validator("registries")
    @classmethod
    def _registries(cls, value: dict[str, ConfiguredLogin]) -> dict[str, ConfiguredLogin]:
        return check_registries(value)

    @field_validator("default_memory", "log_max_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return None if value is None else parse_size(value)

    @field_validator("stop_grace", "pull_timeout", "call_timeout", "inspect_timeout", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value)

    @field_validator("allowed_mounts", mode="before")
    @classmethod
    def _mounts(cls, value: Any) -> Any:
        return parse_allowlist(value)

    @field_validator("user")
    @classmethod
    def _user(cls, value: str | None) -> str | None:
        return None if value is None else check_container_user(value)

    @field_validator("driver_capabilities")
    @classmethod
    def _capabilities(cls, value: str) -> str:
        return ",".join(parse_capabilities(value))


class PriorityClass(BaseModel):
    """A named priority: jobs naming it get ``value``; ``preempt`` lets them preempt.

    ``users`` and ``queues`` grant it (unset: every user, every queue); admins
    may use every class. Rules: ``gpudock.services.priority``.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")
    value: Integer = Field(ge=-1_000_000, le=1_000_000)
    preempt: Flag = True
    description: str = ""
    users: list[str] | None = Field(default=None, description="who may use it; unset: everyone")
    queues: list[str] | None = Field(default=None, description="where; unset: every queue")


class ScorerWeight(BaseModel):
    """One score policy of ``policies.scorers``: its name, weight and options.

    ``options`` are the policy's keyword parameters (e.g. ``binpack``'s
    ``cpu_aware``); names and types are checked against the policy when the
    profile is built (``registry.build_profile``), so at server start.
    """

    model_config = ConfigDict(extra="forbid")

    name: str
    weight: Number = Field(default=1.0, gt=0)
    options: dict[str, bool | int | float | str] = Field(
        default_factory=dict, description="the policy's keyword parameters; default: none"
    )


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
    queueing: list[str] = Field(
        default_factory=lambda: list(DEFAULT_QUEUEING),
        description="queueing strategies, in order (borrow-last, strict-fifo)",
    )
    never_fits: Literal["refuse", "pending"] = Field(
        default="refuse",
        description="a job no node could ever run: refused at submit (422), or kept pending "
        "with the reason (for clusters that nodes may join later)",
    )

    @field_validator("priority_classes")
    @classmethod
    def _unique(cls, value: list[PriorityClass]) -> list[PriorityClass]:
        return unique_classes(value)

    @field_validator("queueing")
    @classmethod
    def _strategies(cls, value: list[str]) -> list[str]:
        return checked_queueing(value)

    def priority_class(self, name: str) -> PriorityClass | None:
        return next((c for c in self.priority_classes if c.name == name), None)


class GpuTopologyConfig(BaseModel):
    """Declared GPU topology: groups of GPU indices (as NVML numbers them).

    ``nvlink``: each group is one NVLink domain (at least two GPUs); a GPU in
    no group has no NVLink peer. ``numa``: group ``i`` is NUMA node ``i``; a
    GPU in no group has an unknown NUMA node. A kind that is given replaces
    what discovery reports for that kind; one left out keeps it. Groups are
    disjoint. Indices the node does not have are reported (WARNING) and
    ignored when the server starts.
    """

    model_config = ConfigDict(extra="forbid")

    nvlink: list[list[int]] | None = Field(default=None, description="NVLink domains")
    numa: list[list[int]] | None = Field(default=None, description="GPUs per NUMA node")

    @field_validator("nvlink", "numa")
    @classmethod
    def _groups(cls, value: list[list[int]] | None, info: ValidationInfo) -> list[list[int]] | None:
        if value is None:
            return None
        seen: dict[int, int] = {}
        for number, group in enumerate(value):
            if not group:
                raise ValueError(f"group {number} is empty")
            if info.field_name == "nvlink" and len(group) < 2:
                raise ValueError(
                    f"group {number} has one GPU; an NVLink domain needs at least two "
                    "(leave a GPU without NVLink peers out)"
                )
            for index in group:
                if index < 0:
                    raise ValueError(f"group {number}: GPU index {index} must be >= 0")
                if seen.get(index) == number:
                    raise ValueError(f"group {number} names GPU {index} twice")
                if index in seen:
                    raise ValueError(
                        f"GPU {index} is in groups {seen[index]} and {number}; "
                        "groups must be disjoint"
                    )
                seen[index] = number
        return value

    def groups_of(self, kind: Topology) -> dict[int, int] | None:
        """``{gpu index: group number}`` for ``kind`` (``nvlink``/``numa``), None if not given."""
        groups: list[list[int]] | None = getattr(self, kind)
        if groups is None:
            return None
        return {index: number for number, group in enumerate(groups) for index in group}


class NodeConfig(BaseModel):
    """What this node offers and whom: labels, taints, CPU cores, declared GPU topology."""

    model_config = ConfigDict(extra="forbid")

    labels: dict[str, str] = Field(default_factory=dict, description="matched by job node_selector")
    taints: list[str] = Field(
        default_factory=list,
        description="'key=value:NoSchedule' (or 'key:NoSchedule'); keeps off jobs without a "
        "matching toleration",
    )
    cpus: float | None = Field(
        default=None,
        gt=0,
        description="CPU cores jobs may request here (sum of job cpus); unset: the host's",
    )
    memory: int | None = Field(
        default=None, description="memory jobs may request here (bytes); unset: the host's"
    )
    gpu_memory_reserve: int = Field(
        default=DEFAULT_GPU_MEMORY_RESERVE,
        ge=0,
        description="bytes of each GPU that memory shares never take (the driver's and "
        "CUDA contexts' own); default 512MiB",
    )
    topology: GpuTopologyConfig | None = Field(
        default=None, description="declared GPU topology; overrides what NVML reports"
    )

    @field_validator("memory", mode="before")
    @classmethod
    def _memory(cls, value: Any) -> Any:
        return None if value is None else _at_least_1kib(value, "memory")

    @field_validator("gpu_memory_reserve", mode="before")
    @classmethod
    def _reserve(cls, value: Any) -> Any:
        return parse_size(value)

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            check_label(key, label)
        return dict(sorted(value.items()))

    @field_validator("taints")
    @classmethod
    def _taints(cls, value: list[str]) -> list[str]:
        """Canonical ``key[=value]:NoSchedule`` strings; one taint per key."""
        taints: list[Taint] = []
        for text in value:
            try:
                taint = parse_taint(text)
            except ValueError as err:
                message = str(err)
                raise ValueError(
                    message if message.startswith("taint") else f"taint {text!r}: {message}"
                ) from None
            if any(t.key == taint.key for t in taints):
                raise ValueError(f"taint key {taint.key!r} is given twice")
            taints.append(taint)
        return [str(t) for t in taints]

    def traits(self) -> NodeTraits:
        return NodeTraits(
            labels=dict(self.labels),
            taints=tuple(self.taints),
            cpus=self.cpus,
            gpu_memory_reserve=self.gpu_memory_reserve,
        )


def _at_least_1kib(value: Any, name: str) -> int:
    """``value`` as a size in bytes; ``ValueError`` naming ``name`` below 1KiB."""
    size = parse_size(value)
    if size < 1024:
        raise ValueError(f"{name} must be at least 1KiB")
    return size


class ApiConfig(BaseModel):
    """Limits of the REST API."""

    model_config = ConfigDict(extra="forbid")

    max_body_bytes: int = Field(
        default=1024 * 1024, description="largest request body (413 above it); default 1MiB"
    )
    max_array_size: int = Field(default=1000, ge=1, description="most tasks in one job array")

    @field_validator("max_body_bytes", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return _at_least_1kib(value, "max_body_bytes")


class LogsConfig(BaseModel):
    """Job log archives (``$GPUDOCK_HOME/logs/job-N/attempt-K.log``)."""

    model_config = ConfigDict(extra="forbid")

    max_bytes: int = Field(
        default=100 * 1024**2,
        description="largest archive per attempt; a longer log keeps its tail; default 100MiB",
    )

    @field_validator("max_bytes", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return _at_least_1kib(value, "max_bytes")


class MetricsConfig(BaseModel):
    """``GET /metrics``: open by default; with ``token``, scrapes send it as a bearer token."""

    model_config = ConfigDict(extra="forbid")

    token: str | None = Field(default=None, min_length=16, description="default: no token needed")


def unique_classes(value: list[PriorityClass]) -> list[PriorityClass]:
    """``value``, or ``ValueError`` naming the priority class names given twice."""
    names = [c.name for c in value]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"priority class names must be unique; repeated: {', '.join(dupes)}")
    return value


class SwarmConfig(BaseModel):
    """The ``swarm`` backend (``backend: swarm``): node loss, agents, starts, gangs."""

    model_config = ConfigDict(extra="forbid")

    node_grace: float = Field(
        default=60.0,
        gt=0,
        description="how long a node may be not ready before its jobs are LOST (and requeued "
        "per retries); default 60s",
    )
    agent_interval: float = Field(
        default=5.0, gt=0, description="how often node agents report; default 5s"
    )
    start_timeout: float = Field(
        default=300.0,
        gt=0,
        description="a job's service must be running within this, else it FAILS; default 5m",
    )
    keep_exited: float = Field(
        default=600.0,
        ge=0,
        description="agents remove the stopped containers of ended attempts after this",
    )
    master_port: int = Field(
        default=29500, ge=1, le=65535, description="MASTER_PORT of multi-node gangs"
    )

    @field_validator("node_grace", "agent_interval", "start_timeout", "keep_exited", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value)

    @model_validator(mode="after")
    def _lease(self) -> SwarmConfig:
        """Agents fence by themselves ``node_grace - 2 * agent_interval`` after they lose
        the server: that must be at least two intervals, or a healthy agent between two
        reports would look cut off."""
        if self.node_grace < 4 * self.agent_interval:
            raise ValueError(
                f"node_grace ({self.node_grace:g}s) must be at least 4 x agent_interval "
                f"({4 * self.agent_interval:g}s): agents stop their node's jobs by themselves "
                "two intervals before the grace ends"
            )
        return self


class ServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    backend: str = Field(
        default="docker",
        description="the executor (gpudock.executors.registry): docker (this host's engine) "
        "or swarm (the Swarm this host manages)",
    )
    swarm: SwarmConfig = Field(default_factory=SwarmConfig)
    node_name: str | None = Field(default=None, description="default: the host name")
    node: NodeConfig = Field(default_factory=NodeConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    job_defaults: JobDefaults = Field(default_factory=JobDefaults)  # cpus/memory jobs leave unset
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    logs: LogsConfig = Field(default_factory=LogsConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    events: EventsConfig = Field(default_factory=EventsConfig)  # event log pruning
    gpus: GpuNodeConfig = Field(default_factory=GpuNodeConfig)  # watchdog, health, MPS
    reconcile_interval: float = Field(default=5.0, gt=0)
    schedule_interval: float = Field(default=2.0, gt=0)

    @field_validator("reconcile_interval", "schedule_interval", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value)


def checked_queueing(names: list[str]) -> list[str]:
    """``names`` when every one is a known queueing strategy, each once; else ``ValueError``
    listing the known ones (``gpudock.queue.strategies``)."""
    strategies(names)  # ValueError for an unknown name, listing the known ones
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"queueing strategies must be unique; repeated: {', '.join(repeated)}")
    return names


def load_config(path: str | Path | None) -> ServerConfig:
    """Read a YAML config file; raise ``InvalidInput`` with the failing key."""
    if path is None:
        return ServerConfig()
    file = Path(path)
    try:
        data = load_document(file) or {}
    except DocumentError as exc:  # "cannot read config F: …", "config F:3:5: problem"
        message = str(exc)
        if message.startswith("cannot read "):
            raise InvalidInput(message.replace("cannot read ", "cannot read config ", 1)) from exc
        raise InvalidInput(f"config {message}") from exc
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
