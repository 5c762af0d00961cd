"""Queue configuration: the ``queues:`` section of the server config.

Example (sizes accept ``320GiB``, durations ``7d``)::

    queues:
      cohorts: [research]
      fair_share:
        half_life: 7d              # historical usage halves every 7 days
        history_weight: 1.0        # effective usage = current + 1.0 x decayed average
        resource_weights: {gpus: 1, gpu_memory: 1, cpus: 0}
      queues:
        - name: vision
          cohort: research
          weight: 2
          guarantee: {gpus: 16, gpu_memory: 1280GiB}
          limit: {gpus: 24}
        - name: nlp
          cohort: research
          guarantee: {gpus: 8}
          borrow: false            # never above its guarantee
          lend: true               # its unused guarantee may be borrowed
          default_priority: 0      # a job's priority when it names none
          max_user_priority: 10    # users may raise their own jobs up to here
          members: [alice, "group:vision"]   # who may submit; unset: everyone
          max_pending_per_user: 20 # a user's PENDING jobs here; over it a submit gets 429
          max_running_gpus_per_user: 4   # GPUs one user's jobs hold here; over it jobs wait
      groups:
        vision: [alice, bob]

An unset guarantee is 0 and an unset limit is unlimited. Queue ``default``
exists even when not declared (``QueueSet`` adds it). Structural mistakes
(duplicate names, unknown cohorts or groups, guarantee above limit) fail validation
here; comparing guarantees with the cluster's capacity needs the cluster, so
that is ``capacity_warnings`` in ``quota.py``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from gpudock.core.spec_schema import NUMBER_OR_TEXT, Flag, Integer, Number
from gpudock.core.units import parse_duration, parse_size
from gpudock.core.users import check_user
from gpudock.queue.resources import RESOURCES, Resource, amount, exact

DEFAULT_QUEUE = "default"
GROUP_PREFIX = "group:"
_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")


def _number_or_text(schema: dict[str, Any]) -> None:
    """A number or text with a unit (``'7d'``), as the before-validator accepts."""
    nullable = {"type": "null"} in schema.get("anyOf", [])
    for key in ("type", "exclusiveMinimum", "minimum"):
        schema.pop(key, None)
    schema["anyOf"] = [{"type": "number", "exclusiveMinimum": 0}, {"type": "string"}]
    if nullable:
        schema["anyOf"].append({"type": "null"})


def _check_name(kind: str, value: str) -> str:
    if not _NAME_RE.fullmatch(value):
        raise ValueError(
            f"{kind} name must be 1-63 characters of letters, digits, '_', '.', '-', "
            f"starting with a letter or digit; got {value!r}"
        )
    return value


def _check_member(value: str) -> str:
    """A queue member: a user name, or ``group:NAME``."""
    if value.startswith(GROUP_PREFIX):
        _check_name("group", value.removeprefix(GROUP_PREFIX))
        return value
    try:
        return check_user(value)
    except ValueError as exc:
        raise ValueError(f"{exc}, or 'group:NAME'") from None


class QuotaConfig(BaseModel):
    """An amount per resource; an unset resource is "not said" (see ``QueueConfig``).

    ``gpus`` counts GPU-equivalents (a 20GiB share of an 80GiB GPU is 0.25),
    ``gpu_memory`` bytes (accepts ``320GiB``), ``cpus`` cores.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: Number | None = Field(default=None, ge=0, description="GPU-equivalents")
    gpu_memory: int | None = Field(
        default=None, description="bytes (accepts '320GiB')", json_schema_extra=NUMBER_OR_TEXT
    )
    cpus: Number | None = Field(default=None, ge=0, description="CPU cores")

    @field_validator("gpu_memory", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        return None if value is None else parse_size(value)

    def get(self, resource: Resource) -> float | int | None:
        value: float | int | None = getattr(self, resource)
        return value

    def named(self) -> tuple[Resource, ...]:
        """The resources this quota sets, in ``RESOURCES`` order."""
        return tuple(r for r in RESOURCES if self.get(r) is not None)


class QueueConfig(BaseModel):
    """One queue: its cohort, fair-share weight, guarantee, limit and lending rules.

    ``guarantee`` is capacity the queue can always get back (unset = 0);
    ``limit`` caps its usage, borrowed or not (unset = unlimited).
    ``borrow``: may it use more than its guarantee (from its cohort's lent
    capacity and the cluster's unguaranteed capacity)? ``lend``: may queues of
    its cohort borrow its unused guarantee?

    ``default_priority`` is the priority of a job that names neither a
    priority nor a class. A user (not an admin) may set a raw priority of at
    most ``max_user_priority``, or, when that is unset, at most
    ``default_priority`` (only lower, like Slurm's ``nice``). A raw priority
    never lets a job preempt; only a preempting priority class does.

    ``members`` lists who may submit here: user names and ``group:NAME``
    entries (groups are declared in ``QueuesConfig.groups``); unset, the
    queue is open to every user. Admins may submit to every queue. User
    names are checked against the user pattern only (gpudock has no user
    table). ``max_pending_per_user`` caps each user's PENDING jobs here;
    ``max_running_gpus_per_user`` caps the GPU-equivalents each user's jobs
    hold here (over it a job waits with a ``quota`` reason:
    ``queue/user_limits.py``). ``default_runtime`` is how long start
    estimates assume a job without ``max_runtime`` runs (``sim/start_times.py``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    cohort: str | None = None
    weight: Number = Field(default=1.0, gt=0, description="fair-share weight")
    guarantee: QuotaConfig = Field(default_factory=QuotaConfig)
    limit: QuotaConfig = Field(default_factory=QuotaConfig)
    borrow: Flag = True
    lend: Flag = True
    default_priority: Integer = Field(default=0, ge=-1_000_000, le=1_000_000)
    max_user_priority: Integer | None = Field(
        default=None,
        ge=-1_000_000,
        le=1_000_000,
        description="the highest raw priority a user may set; unset: default_priority",
    )
    members: list[Annotated[str, AfterValidator(_check_member)]] | None = Field(
        default=None, description="users and 'group:NAME' who may submit; unset: everyone"
    )
    max_pending_per_user: Integer | None = Field(
        default=None, ge=1, description="each user's PENDING jobs in this queue; unset: no limit"
    )
    max_running_gpus_per_user: Number | None = Field(
        default=None,
        gt=0,
        description="GPU-equivalents each user's jobs may hold in this queue; unset: no limit",
    )
    default_runtime: Number | None = Field(
        default=None,
        gt=0,
        description="seconds (accepts '4h') a job without max_runtime is assumed to run, for "
        "start estimates only (it stops no job); unset: such a job's end is unknown",
        json_schema_extra=_number_or_text,
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _check_name("queue", value)

    @field_validator("default_runtime", mode="before")
    @classmethod
    def _runtime(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @field_validator("cohort")
    @classmethod
    def _cohort(cls, value: str | None) -> str | None:
        return None if value is None else _check_name("cohort", value)

    @field_validator("members")
    @classmethod
    def _members_once(cls, value: list[str] | None) -> list[str] | None:
        for index, member in enumerate(value or []):
            if member in (value or [])[:index]:
                raise ValueError(f"{member!r} is listed twice")
        return value

    @model_validator(mode="after")
    def _guarantee_within_limit(self) -> QueueConfig:
        for resource in RESOURCES:
            guarantee, limit = self.guarantee.get(resource), self.limit.get(resource)
            if guarantee is not None and limit is not None and guarantee > limit:
                raise ValueError(
                    f"queue {self.name!r}: guarantee of {amount(resource, exact(guarantee))} "
                    f"exceeds its limit of {amount(resource, exact(limit))}"
                )
        return self

    @model_validator(mode="after")
    def _user_priority_above_default(self) -> QueueConfig:
        if self.max_user_priority is not None and self.max_user_priority < self.default_priority:
            raise ValueError(
                f"queue {self.name!r}: max_user_priority {self.max_user_priority} is below "
                f"its default_priority {self.default_priority} (users may always lower theirs)"
            )
        return self

    @property
    def user_priority_limit(self) -> int:
        """The highest raw priority a user (not an admin) may give a job here."""
        if self.max_user_priority is None:
            return self.default_priority
        return self.max_user_priority


class ResourceWeights(BaseModel):
    """How much each resource counts in dominant shares (0 ignores it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpus: Number = Field(default=1.0, ge=0)
    gpu_memory: Number = Field(default=1.0, ge=0)
    cpus: Number = Field(default=1.0, ge=0)

    @model_validator(mode="after")
    def _some_weight(self) -> ResourceWeights:
        if not any(self.get(r) > 0 for r in RESOURCES):
            raise ValueError("at least one resource weight must be greater than zero")
        return self

    def get(self, resource: Resource) -> float:
        value: float = getattr(self, resource)
        return value


class FairShareConfig(BaseModel):
    """Fair-share ordering: weighted DRF over current plus decayed historical usage.

    ``half_life`` (accepts ``7d``): historical usage halves every half-life.
    ``history_weight``: effective usage = current + history_weight x decayed
    average usage (0: current usage only, as Kueue).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    half_life: float = Field(
        default=7 * 86400.0,
        gt=0,
        description="seconds (accepts '7d')",
        json_schema_extra=_number_or_text,
    )
    history_weight: Number = Field(default=1.0, ge=0)
    resource_weights: ResourceWeights = Field(default_factory=ResourceWeights)

    @field_validator("half_life", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return parse_duration(value)


class QueuesConfig(BaseModel):
    """Cohorts, groups, queues and fair-share settings.

    Queue names are unique; every cohort and every ``group:NAME`` a queue
    names is declared here.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    cohorts: list[str] = Field(default_factory=list)
    groups: dict[str, list[str]] = Field(
        default_factory=dict, description="group name -> user names, for queue members"
    )
    queues: list[QueueConfig] = Field(default_factory=list)
    fair_share: FairShareConfig = Field(default_factory=FairShareConfig)

    @field_validator("groups")
    @classmethod
    def _group_members(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for name, users in value.items():
            _check_name("group", name)
            for index, user in enumerate(users):
                try:
                    check_user(user)
                except ValueError as exc:
                    raise ValueError(f"groups.{name}[{index}]: {exc}") from None
        return value

    @field_validator("cohorts")
    @classmethod
    def _cohort_names(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for name in value:
            _check_name("cohort", name)
            if name in seen:
                raise ValueError(f"cohort {name!r} is declared more than once")
            seen.add(name)
        return value

    @model_validator(mode="after")
    def _queues_consistent(self) -> QueuesConfig:
        first: dict[str, int] = {}
        for index, queue in enumerate(self.queues):
            if queue.name in first:
                raise ValueError(
                    f"queue {queue.name!r} is declared more than once "
                    f"(queues[{first[queue.name]}] and queues[{index}])"
                )
            first[queue.name] = index
            if queue.cohort is not None and queue.cohort not in self.cohorts:
                declared = ", ".join(self.cohorts) or "none; list it under queues.cohorts"
                raise ValueError(
                    f"queue {queue.name!r} refers to unknown cohort {queue.cohort!r} "
                    f"(declared cohorts: {declared})"
                )
            self._check_groups(index, queue)
        return self

    def _check_groups(self, index: int, queue: QueueConfig) -> None:
        """Every ``group:NAME`` in the queue's members is declared; the error names its path."""
        for position, member in enumerate(queue.members or []):
            group = member.removeprefix(GROUP_PREFIX)
            if member.startswith(GROUP_PREFIX) and group not in self.groups:
                declared = ", ".join(sorted(self.groups)) or "none; declare it under groups"
                raise ValueError(
                    f"queues[{index}].members[{position}]: queue {queue.name!r} names unknown "
                    f"group {group!r} (declared groups: {declared})"
                )

    def queue(self, name: str) -> QueueConfig:
        """The declared queue ``name``, or an undeclared queue's defaults."""
        return next((q for q in self.queues if q.name == name), None) or QueueConfig(name=name)
