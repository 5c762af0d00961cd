"""Jobs: the user's ``JobSpec`` and the server's ``Job`` with its state machine.

State machine (every terminal state carries a reason)::

    PENDING ──► ALLOCATED ──► STARTING ──► RUNNING ──► SUCCEEDED
       │            │             │           ├──────► FAILED
       │            │             │           ├──────► CANCELLED
       │            │             │           └──────► LOST
       │            └─► PENDING   └─► PENDING (requeued: retry, lost allocation)
       └──────────► CANCELLED / FAILED

``RUNNING → PENDING`` and ``STARTING → PENDING`` are requeues (a retry of a
lost or failed container); the job keeps its id and submit time and its
``attempt`` counter grows. Terminal states never change again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpudock.core import spec_schema as schema
from gpudock.core.affinity import Topology, parse_selector, parse_toleration
from gpudock.core.arrays import ARRAY_PATTERN, parse_array
from gpudock.core.elastic import (
    ElasticMode,
    gpus_schema,
    normalise_range,
    range_problem,
)
from gpudock.core.errors import IllegalTransition
from gpudock.core.image_ref import (
    IMAGE_REFERENCE_PATTERN,
    MAX_REFERENCE_LENGTH,
    check_image_reference,
)
from gpudock.core.mig import PROFILE_PATTERN as MIG_PROFILE_PATTERN
from gpudock.core.mig import mig_request_problem
from gpudock.core.mount_forms import canonical_mount
from gpudock.core.units import parse_duration, parse_size


class JobState(StrEnum):
    PENDING = "PENDING"
    ALLOCATED = "ALLOCATED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    LOST = "LOST"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES

    @property
    def holds_resources(self) -> bool:
        """True while the job owns an allocation of GPUs."""
        return self in (JobState.ALLOCATED, JobState.STARTING, JobState.RUNNING)


TERMINAL_STATES = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST}
)

TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.ALLOCATED, JobState.CANCELLED, JobState.FAILED}),
    JobState.ALLOCATED: frozenset(
        {JobState.STARTING, JobState.PENDING, JobState.CANCELLED, JobState.FAILED}
    ),
    JobState.STARTING: frozenset(
        {
            JobState.RUNNING,
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.LOST,
            JobState.PENDING,
        }
    ),
    JobState.RUNNING: frozenset(
        {JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST, JobState.PENDING}
    ),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
    JobState.LOST: frozenset(),
}


def check_transition(current: JobState, target: JobState, reason: str | None = None) -> None:
    """Raise ``IllegalTransition`` unless ``current → target`` is allowed.

    Terminal targets additionally require a non-empty ``reason``.
    """
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"job cannot go from {current} to {target}")
    if target.terminal and not reason:
        raise IllegalTransition(f"a job entering {target} needs a reason")


_NAME_RE = re.compile(schema.NAME_PATTERN)
_ENV_KEY_RE = re.compile(schema.ENV_KEY_PATTERN)
_LABEL_KEY_RE = re.compile(schema.LABEL_KEY_PATTERN)
_MOUNT_MODES = ("ro", "rw")
MAX_ARGS = 4096  # command arguments
MAX_ENV = 1024  # env entries
MAX_LABELS = 64  # labels
MAX_TEXT = 64 * 1024  # characters in one argument, env value or label value
MIN_MEMORY = 6 * 1024 * 1024
MAX_DEPENDENCIES = 64  # job ids in ``after`` plus ``after_ok``
MAX_PREEMPTION_SECONDS = 7 * 86400.0  # restart_cost and checkpoint_interval: at most a week
JobId = Annotated[int, Field(ge=1, le=2**31 - 1)]


def _spec_schema(schema: dict[str, Any]) -> None:
    """The spellings the spec accepts besides its fields (``min_gpus``, ``gpus_per_node``).

    Rules between fields (a minimum given twice, a range with ``gpu_memory``,
    ``elastic: restart`` without a range: ``gpudock.core.elastic``) are 422s
    the schema does not state: its ``if``/``then`` form drove schemathesis'
    generator into a CPython error, and a minimum above the maximum cannot
    be stated at all.
    """
    properties = schema.setdefault("properties", {})
    properties["min_gpus"] = {
        "type": "integer",
        "minimum": 1,
        "maximum": 1024,
        "description": "elastic job: the fewest GPUs it runs on (with max_gpus); same as gpus",
    }
    properties["gpus_per_node"] = {
        "type": "integer",
        "minimum": 0,
        "maximum": 1024,
        "description": "GPUs on each node of a multi-node job; same as gpus",
    }


class JobSpec(BaseModel):
    """What a user asks for. Unknown fields are rejected.

    Sizes (``gpu_memory``, ``memory``, ``shm_size``) accept strings such as
    ``20GiB`` and are stored in bytes; ``max_runtime`` accepts ``2h`` and is
    stored in seconds. ``gpu_memory`` turns the job into a *shared* job: it gets
    that much memory on each of ``gpus`` GPUs and may share them with other
    shared jobs, never with exclusive ones.

    Where it may run (semantics in ``gpudock.core.affinity``): ``node_selector``
    (``{key: value}``, or ``["key=value"]``, stored as a dict) names labels its
    node must carry; ``tolerations`` (``key=value[:NoSchedule]``, ``key`` or
    ``*``, stored in canonical form) the node taints it accepts; ``topology``
    (``nvlink`` or ``numa``) asks that all its GPUs on a node share one NVLink
    domain or one NUMA node. A job with fewer than two GPUs per node satisfies
    any ``topology`` trivially, so it is accepted and has no effect there.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_spec_schema)

    image: str = Field(
        description="container image, e.g. pytorch/pytorch:latest (Docker's reference grammar)",
        json_schema_extra={
            "pattern": IMAGE_REFERENCE_PATTERN,
            "minLength": 1,
            "maxLength": MAX_REFERENCE_LENGTH,
        },
    )
    name: str | None = Field(
        default=None,
        description="a short name for humans",
        json_schema_extra={"pattern": schema.NAME_PATTERN},
    )
    command: list[str] | None = Field(
        default=None,
        max_length=MAX_ARGS,
        description="argv; default: the image's",
        json_schema_extra={"items": {"type": "string", "maxLength": MAX_TEXT}},
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_ENV,
        json_schema_extra=schema.text_map(schema.ENV_KEY_ALLOWED_PATTERN, MAX_TEXT),
    )
    gpus: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="number of GPUs (0 for CPU-only), or a range '2-4' (an elastic job)",
        json_schema_extra=gpus_schema,
    )
    max_gpus: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="elastic job: the most GPUs it may get (gpus, or min_gpus, is the least)",
    )
    elastic: ElasticMode | None = Field(
        default=None,
        description="'restart': a running elastic job may be restarted on more GPUs",
    )
    gpu_memory: int | None = Field(
        default=None,
        description="per-GPU memory share in bytes (accepts '20GiB'); shared job",
        json_schema_extra=schema.NUMBER_OR_TEXT,
    )
    gpu_compute: int | None = Field(
        default=None,
        description=(
            "percent (1-100) of each GPU's compute for a shared job: its MPS active thread "
            "percentage on nodes that run MPS"
        ),
        json_schema_extra={"minimum": 1, "maximum": 100},
    )
    gpu_model: str | None = Field(default=None, description="GPU model constraint, e.g. H100")
    mig: str | None = Field(
        default=None,
        description=(
            "one MIG device of this profile (e.g. 1g.10gb, any profile a node's GPUs "
            "report) instead of whole GPUs or a memory share; gpus is then 1"
        ),
        json_schema_extra={"pattern": MIG_PROFILE_PATTERN},
    )
    cpus: float | None = Field(
        default=None, gt=0, le=4096, allow_inf_nan=False, description="CPU limit in cores"
    )
    memory: int | None = Field(
        default=None,
        description="memory limit in bytes (accepts '8GiB')",
        json_schema_extra=schema.NUMBER_OR_TEXT,
    )
    shm_size: int | None = Field(
        default=None,
        description="/dev/shm size (accepts '1GiB')",
        json_schema_extra=schema.NUMBER_OR_TEXT,
    )
    priority: int = Field(default=0, ge=-1_000_000, le=1_000_000)
    queue: str = Field(default="default", json_schema_extra={"pattern": schema.NAME_PATTERN})
    labels: dict[str, str] = Field(
        default_factory=dict,
        max_length=MAX_LABELS,
        json_schema_extra=schema.text_map(schema.LABEL_KEY_ALLOWED_PATTERN, MAX_TEXT),
    )
    max_runtime: float | None = Field(
        default=None,
        description="seconds (accepts '2h'); the job is stopped when it runs over",
        json_schema_extra=schema.NUMBER_OR_TEXT,
    )
    retries: int = Field(default=0, ge=0, le=100, description="re-runs after a failure or loss")
    mounts: list[str] = Field(
        default_factory=list,
        description=(
            "host bind mounts 'HOST:CONTAINER[:ro|rw]' (read-only unless ':rw'), or Docker's "
            "'type=bind,src=HOST,dst=CONTAINER[,readonly]' (read-write unless readonly), "
            "stored as the first; only admin-allowlisted paths, read-write only under an "
            "entry that allows it"
        ),
    )
    priority_class: str | None = Field(
        default=None, description="a priority class from the server config (sets priority)"
    )
    preemptible: bool = Field(default=True, strict=True, description="false: never preempted")
    min_runtime: float | None = Field(
        default=None,
        description="seconds (accepts '30m') it runs before it may be preempted",
        json_schema_extra=schema.NUMBER_OR_TEXT,
    )
    restart_cost: float | None = Field(
        default=None,
        description="seconds (accepts '3m') a restart costs this job: the container starts, "
        "the model and its checkpoint load; unset: the cluster's, or its measured start time",
        json_schema_extra=schema.NUMBER_OR_TEXT,
    )
    checkpoint_interval: float | None = Field(
        default=None,
        description="seconds (accepts '30m') between the job's checkpoints: a preemption "
        "loses the run since the last one; unset: it loses nothing beyond restart_cost",
        json_schema_extra=schema.NUMBER_OR_TEXT,
    )
    nodes: int = Field(
        default=1, ge=1, le=1024, description="nodes for a gang job; `gpus` is then per node"
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        description="node labels the job's node must carry: {key: value} (or ['key=value'])",
        json_schema_extra=schema.node_selector_schema(),
    )
    tolerations: list[str] = Field(
        default_factory=list,
        description="node taints the job accepts: 'key=value[:NoSchedule]', 'key' or '*'",
        json_schema_extra={"items": {"type": "string", "pattern": schema.TOLERATION_PATTERN}},
    )
    topology: Topology | None = Field(
        default=None,
        description=(
            "'nvlink': all GPUs on a node in one NVLink domain; 'numa': on one NUMA node "
            "(no effect with fewer than 2 GPUs)"
        ),
    )
    after: list[JobId] = Field(
        default_factory=list,
        max_length=MAX_DEPENDENCIES,
        description="job ids that must end (any way) before this job may start",
    )
    after_ok: list[JobId] = Field(
        default_factory=list,
        max_length=MAX_DEPENDENCIES,
        description="job ids that must succeed first; if one fails, this job is cancelled",
    )
    array: str | None = Field(
        default=None,
        description="a job array 'FIRST-LAST[%LIMIT]': one task per index, LIMIT at once",
        json_schema_extra={"pattern": ARRAY_PATTERN},
    )

    @model_validator(mode="before")
    @classmethod
    def _gpus_per_node(cls, data: Any) -> Any:
        """Accept ``gpus_per_node`` (the multi-node spelling) as ``gpus``."""
        if isinstance(data, dict) and "gpus_per_node" in data:
            data = dict(data)
            per_node = data.pop("gpus_per_node")
            if "gpus" in data:
                raise ValueError("give gpus_per_node or gpus (GPUs per node), not both")
            data["gpus"] = per_node
        if isinstance(data, dict):
            data = normalise_range(data)  # ``gpus: '2-4'``, ``min_gpus``: ``gpus`` + ``max_gpus``
        if isinstance(data, dict) and data.get("mig") is not None and "gpus" not in data:
            data = {**data, "gpus": 1}  # a MIG job holds one device: its ``gpus`` reads 1
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _no_nul(cls, value: Any, info: ValidationInfo) -> Any:
        """No field may hold a NUL character: Docker refuses them in images, argv and
        env, and PostgreSQL cannot store them."""
        if _holds_nul(value):
            raise ValueError(f"{info.field_name} must not contain NUL (\\x00) characters")
        return value

    @field_validator(
        "gpus", "max_gpus", "priority", "retries", "nodes", "cpus", "gpu_compute", mode="before"
    )
    @classmethod
    def _json_number(cls, value: Any, info: ValidationInfo) -> Any:
        """A JSON number, as the schema says: ``true`` is not 1, ``"2"`` is not 2."""
        if isinstance(value, bool | str):
            raise ValueError(f"{info.field_name} must be a number, not {value!r}")
        return value

    @field_validator("array")
    @classmethod
    def _array(cls, value: str | None) -> str | None:
        if value is not None:
            parse_array(value)  # ValueError names the problem
        return value

    @field_validator("after", "after_ok", mode="before")
    @classmethod
    def _json_ids(cls, value: Any, info: ValidationInfo) -> Any:
        """JSON numbers, as the schema says: ``true`` is not 1, ``"2"`` is not 2."""
        if isinstance(value, list) and any(isinstance(v, bool | str) for v in value):
            raise ValueError(f"{info.field_name} must hold job ids (numbers)")
        return value

    @field_validator("after", "after_ok")
    @classmethod
    def _dependencies(cls, value: list[int]) -> list[int]:
        """Each id once, in the order given."""
        return list(dict.fromkeys(value))

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return check_image_reference(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        if value is not None and not _NAME_RE.fullmatch(value):
            raise ValueError(
                "name must be 1-63 characters of letters, digits, '_', '.', '-', "
                f"starting with a letter or digit; got {value!r}"
            )
        return value

    @field_validator("queue")
    @classmethod
    def _queue(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError(
                f"queue must be 1-63 characters of letters, digits, '_', '.', '-'; got {value!r}"
            )
        return value

    @field_validator("command", "env", "labels")
    @classmethod
    def _bounded_text(cls, value: Any, info: ValidationInfo) -> Any:
        """No single argument, env value or label value over ``MAX_TEXT`` characters."""
        items = value.values() if isinstance(value, dict) else (value or ())
        for item in items:
            if len(item) > MAX_TEXT:
                raise ValueError(
                    f"{info.field_name} holds a value of {len(item)} characters; "
                    f"at most {MAX_TEXT} are allowed"
                )
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(value) == 0:
            return None
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _ENV_KEY_RE.fullmatch(key):
                raise ValueError(f"env key {key!r} is not a valid variable name")
            if key.startswith("GPUDOCK_") or key in ("NVIDIA_VISIBLE_DEVICES",):
                raise ValueError(f"env key {key!r} is reserved for gpudock")
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _LABEL_KEY_RE.fullmatch(key) or key.startswith("gpudock."):
                raise ValueError(
                    f"label key {key!r} must be 1-63 of letters, digits, '_./-' "
                    "and must not start with 'gpudock.'"
                )
        return value

    @field_validator("gpu_memory", "memory", "shm_size", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        if value is None:
            return None
        size = parse_size(value)
        if size <= 0:
            raise ValueError("size must be greater than zero")
        return size

    @field_validator("memory")
    @classmethod
    def _memory_floor(cls, value: int | None) -> int | None:
        if value is not None and value < MIN_MEMORY:
            raise ValueError(f"memory must be at least 6MiB (Docker's minimum), got {value} bytes")
        return value

    @field_validator("max_runtime", "min_runtime", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        if value is None:
            return None
        seconds = parse_duration(value)
        if seconds <= 0:
            raise ValueError("duration must be greater than zero")
        return seconds

    @field_validator("restart_cost", "checkpoint_interval", mode="before")
    @classmethod
    def _preemption_cost(cls, value: Any, info: ValidationInfo) -> Any:
        """A duration (``parse_duration``): ``restart_cost`` may be 0 (restarts are free),
        ``checkpoint_interval`` must be positive; neither more than a week."""
        if value is None:
            return None
        if isinstance(value, bool):
            raise ValueError(f"{info.field_name} must be a duration, not {value!r}")
        seconds = parse_duration(value)
        if info.field_name == "checkpoint_interval" and seconds <= 0:
            raise ValueError("checkpoint_interval must be greater than zero")
        if seconds > MAX_PREEMPTION_SECONDS:
            raise ValueError(f"{info.field_name} must be at most 7 days, got {seconds:g} s")
        return seconds

    @field_validator("gpu_compute")
    @classmethod
    def _gpu_compute(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= 100:
            raise ValueError(f"gpu_compute is a percentage from 1 to 100, got {value}")
        return value

    @field_validator("gpu_model")
    @classmethod
    def _gpu_model(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip()
        if not value:
            raise ValueError("gpu_model must not be empty; omit it to accept any model")
        return value

    @field_validator("mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        """Docker's ``type=bind,src=…,dst=…[,readonly]`` is stored in gpudock's form."""
        mounts = [canonical_mount(mount) for mount in value]
        for mount in mounts:
            parse_mount(mount)
        return mounts

    @field_validator("node_selector", mode="before")
    @classmethod
    def _selector_list(cls, value: Any) -> Any:
        """Accept ``["key=value", ...]`` as well as ``{key: value}``."""
        if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
            return value
        keys = [text.partition("=")[0].strip() for text in value]
        for key in keys:
            if keys.count(key) > 1:
                raise ValueError(f"node selector names label key {key!r} twice")
        return dict(parse_selector(value))

    @field_validator("node_selector")
    @classmethod
    def _node_selector(cls, value: dict[str, str]) -> dict[str, str]:
        return dict(parse_selector(value))

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, value: list[str]) -> list[str]:
        """Each parsed and stored canonically (``key=value:NoSchedule``); repeats dropped."""
        canonical: list[str] = []
        for text in value:
            try:
                toleration = str(parse_toleration(text))
            except ValueError as err:
                raise ValueError(_naming("toleration", text, err)) from None
            if toleration not in canonical:
                canonical.append(toleration)
        return canonical

    @model_validator(mode="after")
    def _compute_share(self) -> JobSpec:
        """``gpu_compute`` is a share of a GPU's compute, so only a shared job has one."""
        if self.gpu_compute is not None and self.gpu_memory is None:
            raise ValueError(
                "gpu_compute is the compute share of a shared job: give gpu_memory (and gpus) "
                "with it; a job with whole GPUs has all of their compute"
            )
        return self

    @model_validator(mode="after")
    def _mig_device(self) -> JobSpec:
        """A MIG job holds exactly one MIG device of one node (``core/mig.py``)."""
        if self.mig is None:
            return self
        problem = mig_request_problem(self.mig, self.gpus, self.gpu_memory)
        if problem is None and self.gpus == 0:
            problem = f"mig asks for one {self.mig} device; it cannot be combined with gpus: 0"
        if problem is None and (self.max_gpus is not None or self.nodes > 1):
            problem = (
                f"mig asks for one {self.mig} device on one node; leave max_gpus and nodes out"
            )
        if problem is not None:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _gpu_range(self) -> JobSpec:
        """An elastic job's range is sound (``gpudock.core.elastic``)."""
        problem = range_problem(
            self.gpus, self.max_gpus, self.elastic, self.shared, self.nodes, self.topology
        )
        if problem is not None:
            raise ValueError(problem)
        return self

    @property
    def elastic_range(self) -> tuple[int, int] | None:
        """``(min, max)`` GPUs of an elastic job; None for a fixed count."""
        if self.max_gpus is None or self.max_gpus <= self.gpus:
            return None
        return (self.gpus, self.max_gpus)

    @property
    def shared(self) -> bool:
        """A shared job holds a memory share of each GPU instead of whole GPUs."""
        return self.gpu_memory is not None and self.gpus > 0


def _holds_nul(value: Any) -> bool:
    """True if ``value``, or a string in it (keys included), holds a NUL character."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_nul(item) for item in value)
    return False


def _naming(what: str, text: str, err: ValueError) -> str:
    """``err``'s message, prefixed with ``what 'text': `` unless it already names it."""
    message = str(err)
    return message if message.startswith(what) else f"{what} {text!r}: {message}"


@dataclass(frozen=True, slots=True)
class Mount:
    host: str
    container: str
    read_only: bool


def parse_mount(text: str) -> Mount:
    """Parse ``HOST:CONTAINER[:ro|rw]`` with absolute paths; raise ``ValueError``.

    A mount is read-only unless it says ``:rw``.
    """
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise ValueError(f"mount {text!r} must look like /host/path:/container/path[:ro|rw]")
    host, container = parts[0], parts[1]
    mode = parts[2] if len(parts) == 3 else "ro"
    if not host.startswith("/") or not container.startswith("/"):
        raise ValueError(f"mount {text!r}: both paths must be absolute")
    if mode not in _MOUNT_MODES:
        raise ValueError(f"mount {text!r}: mode must be 'ro' or 'rw', got {mode!r}")
    return Mount(host=host, container=container, read_only=mode == "ro")


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job is not running yet.

    ``layer`` says which part of the system holds it back (``devices``,
    ``constraints``, ``health``, ``quota``, ``priority``…); ``message`` is for
    humans; ``counterfactual`` says what would let it run, when known.
    """

    layer: str
    message: str
    counterfactual: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"layer": self.layer, "message": self.message, "counterfactual": self.counterfactual}


@dataclass(frozen=True, slots=True)
class JobPart:
    """One node's part of a placed job: its node and the GPUs it holds there.

    A multi-node gang has one part per node, in rank order (rank 0 first);
    ``Job.placement`` gives every job's parts, a one-node job's being one.
    """

    node: str
    gpu_uuids: tuple[str, ...]


@dataclass(slots=True)
class Job:
    """A job as the server knows it. Mutated only through the store's transitions."""

    id: int
    spec: JobSpec
    user: str
    state: JobState
    submitted_at: float
    attempt: int = 0
    failures: int = 0  # attempts that failed or were lost (retries use these up)
    version: int = 0
    reason: str | None = None
    pending_reasons: list[PendingReason] = field(default_factory=list)
    allocated_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    node: str | None = None
    container_name: str | None = None  # set when the attempt starts (STARTING)
    container_id: str | None = None
    cancel_requested: bool = False
    # "cancel", "max_runtime", "preempt", "requeue", "resize", "gpu_memory", "gpu_fault"
    stop_requested: str | None = None
    stop_requested_by: str | None = None
    log_path: str | None = None
    gpu_uuids: tuple[str, ...] = ()
    gpu_memory_per_gpu: int | None = None
    array_id: int | None = None  # the array's first task, for a task of a job array
    array_index: int | None = None
    held_by: str | None = None  # a held PENDING job is never scheduled (``gpudock hold``)
    held_at: float | None = None
    gpu_layers: tuple[str, ...] = ()  # memory-isolation layers its attempt started with
    gang: tuple[JobPart, ...] = ()  # a placed multi-node gang's parts, rank order; else ()

    @property
    def placement(self) -> tuple[JobPart, ...]:
        """Where the job's current attempt runs: its gang parts, or its one node; () unplaced."""
        if self.gang:
            return self.gang
        return (JobPart(self.node, self.gpu_uuids),) if self.node is not None else ()

    def on_node(self, node: str) -> bool:
        """True when a part of the current attempt is on ``node``."""
        return any(part.node == node for part in self.placement)


def container_name(instance: str, job_id: int, attempt: int) -> str:
    """Deterministic per installation, job and attempt: a restarted server can never
    start an attempt twice, and two installations sharing one Docker never collide."""
    return f"gpudock-{instance}-{job_id}-a{attempt}"


def member_name(name: str, rank: int) -> str:
    """The name of rank ``rank``'s container (a Swarm service) of a gang attempt ``name``."""
    return f"{name}-r{rank}"


def job_of_container(instance: str, name: str) -> int | None:
    """The job id in a ``container_name(instance, ...)`` (or a ``member_name`` of one),
    or None for any other name."""
    prefix = f"gpudock-{instance}-"
    base, sep, rank = name.rpartition("-r")
    if sep and rank.isdigit() and "-a" in base:
        name = base
    job, sep, attempt = name.removeprefix(prefix).rpartition("-a")
    if not name.startswith(prefix) or not sep or not (job.isdigit() and attempt.isdigit()):
        return None
    return int(job)
