"""SQLAlchemy 2 models. Times are unix seconds (float); sizes are bytes.

Invariants the database itself enforces (defence in depth behind the
applier's conditional updates): a GPU's ``used_memory`` stays within
``0..memory_total`` and its ``shared_jobs`` never goes negative; a job holds
each GPU at most once.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.sql.expression import false as sa_false
from sqlalchemy.sql.expression import true as sa_true


class Base(DeclarativeBase):
    pass


class MetaRow(Base):
    """Key/value facts about this installation, e.g. its instance id."""

    __tablename__ = "meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(128), index=True)
    name: Mapped[str | None] = mapped_column(String(64))
    queue: Mapped[str] = mapped_column(String(64), index=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    spec: Mapped[dict[str, object]] = mapped_column(JSON)
    # Denormalised from spec for scheduling queries.
    gpus: Mapped[int] = mapped_column(Integer)
    gpu_memory: Mapped[int | None] = mapped_column(BigInteger)
    gpu_model: Mapped[str | None] = mapped_column(String(64))
    nodes: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    cpus: Mapped[float | None] = mapped_column(Float)
    max_runtime: Mapped[float | None] = mapped_column(Float)
    min_runtime: Mapped[float | None] = mapped_column(Float)
    restart_cost: Mapped[float | None] = mapped_column(Float)  # declared, seconds
    checkpoint_interval: Mapped[float | None] = mapped_column(Float)  # declared, seconds
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True, server_default=sa_true())
    can_preempt: Mapped[bool] = mapped_column(Boolean, default=False, server_default=sa_false())
    failures: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    node_selector: Mapped[dict[str, str]] = mapped_column(JSON, default=dict, server_default="{}")
    tolerations: Mapped[list[str]] = mapped_column(  # canonical str(Toleration)
        JSON, default=list, server_default="[]"
    )
    topology: Mapped[str | None] = mapped_column(String(16))  # "nvlink" | "numa"

    state: Mapped[str] = mapped_column(String(16), index=True)
    reason: Mapped[str | None] = mapped_column(Text)
    pending_reasons: Mapped[list[dict[str, str | None]] | None] = mapped_column(JSON)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    version: Mapped[int] = mapped_column(Integer, default=0)
    stop_requested: Mapped[str | None] = mapped_column(String(16))
    stop_requested_by: Mapped[str | None] = mapped_column(String(128))
    preempted_for: Mapped[int | None] = mapped_column(Integer)  # the preemptor's job id
    held_by: Mapped[str | None] = mapped_column(String(128))  # a held PENDING job is not scheduled
    held_at: Mapped[float | None] = mapped_column(Float)

    submitted_at: Mapped[float] = mapped_column(Float)
    allocated_at: Mapped[float | None] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    node: Mapped[str | None] = mapped_column(String(128))
    gpu_uuids: Mapped[list[str] | None] = mapped_column(JSON)
    container_id: Mapped[str | None] = mapped_column(String(80))
    container_name: Mapped[str | None] = mapped_column(String(128))
    log_path: Mapped[str | None] = mapped_column(Text)
    # Dependencies and job arrays (``queue/gates.py``); null when the job has none.
    after: Mapped[list[int] | None] = mapped_column(JSON(none_as_null=True))
    after_ok: Mapped[list[int] | None] = mapped_column(JSON(none_as_null=True))
    array_id: Mapped[int | None] = mapped_column(Integer, index=True)
    array_index: Mapped[int | None] = mapped_column(Integer)
    array_limit: Mapped[int | None] = mapped_column(Integer)
    # the memory-isolation layers its current attempt started with ("mps", "watchdog", "hints")
    gpu_layers: Mapped[list[str] | None] = mapped_column(JSON(none_as_null=True))
    # its image's NVIDIA_REQUIRE_* (ImageRequirements.text), learnt at submit; None: unknown/none
    cuda_require: Mapped[str | None] = mapped_column(Text)
    # A multi-node gang's parts in rank order: [[node, [gpu uuid, ...]], ...]; NULL otherwise.
    gang: Mapped[list[list[object]] | None] = mapped_column(JSON(none_as_null=True))


class JobEventRow(Base):
    """Append-only history of every state change of every job."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[float] = mapped_column(Float)
    attempt: Mapped[int] = mapped_column(Integer)
    from_state: Mapped[str] = mapped_column(String(16))
    to_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)


class EventRow(Base):
    """The durable event log (``store/events.py``); id is the monotonic paging cursor.

    ``job_id`` has no foreign key: an event outlives its job until pruned.
    """

    __tablename__ = "events"
    __table_args__ = {"sqlite_autoincrement": True}  # ids never reused after pruning

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    at: Mapped[float] = mapped_column(Float, index=True)
    type: Mapped[str] = mapped_column(String(32), index=True)
    job_id: Mapped[int | None] = mapped_column(Integer, index=True)
    user: Mapped[str | None] = mapped_column(String(128), index=True)
    queue: Mapped[str | None] = mapped_column(String(64))
    node: Mapped[str | None] = mapped_column(String(128))
    payload: Mapped[dict[str, object]] = mapped_column(JSON, default=dict)


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    status_reason: Mapped[str | None] = mapped_column(Text)
    driver_version: Mapped[str | None] = mapped_column(String(64))
    cuda_version: Mapped[str | None] = mapped_column(String(32))
    gpu_source: Mapped[str] = mapped_column(String(16))
    last_seen: Mapped[float] = mapped_column(Float)
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    taints: Mapped[list[str]] = mapped_column(  # canonical str(Taint)
        JSON, default=list, server_default="[]"
    )
    cpus: Mapped[float | None] = mapped_column(Float)  # cores offered to jobs; None: not counted
    memory: Mapped[int | None] = mapped_column(BigInteger)  # bytes offered; None: not counted
    gpu_sharing: Mapped[str | None] = mapped_column(String(16))  # GpuSharing; None: unknown
    # A node of a multi-node engine (Swarm; migration 0013). NULL on the docker backend.
    engine_id: Mapped[str | None] = mapped_column(String(64))  # the Swarm node ID
    availability: Mapped[str | None] = mapped_column(String(16))  # active | pause | drain
    engine_state: Mapped[str | None] = mapped_column(String(16))  # ready | down | ...
    down_since: Mapped[float | None] = mapped_column(Float)  # not ready since (node-loss grace)
    agent_seen_at: Mapped[float | None] = mapped_column(Float)  # the node agent's last report
    fence_nonce: Mapped[str | None] = mapped_column(String(64))  # a returning node must echo it
    fence_nonce_at: Mapped[float | None] = mapped_column(Float)
    fenced_at: Mapped[float | None] = mapped_column(Float)  # last report with nothing stale


class GpuRow(Base):
    __tablename__ = "gpus"
    __table_args__ = (
        CheckConstraint(
            "used_memory >= 0 AND used_memory <= memory_total", name="gpu_memory_bounds"
        ),
        CheckConstraint("shared_jobs >= 0", name="gpu_shared_jobs_nonneg"),
        CheckConstraint(
            "exclusive_job IS NULL OR shared_jobs = 0", name="gpu_exclusive_not_shared"
        ),
    )

    uuid: Mapped[str] = mapped_column(String(96), primary_key=True)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.name"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(128))
    memory_total: Mapped[int] = mapped_column(BigInteger)
    mig_mode: Mapped[bool | None] = mapped_column(Boolean)
    emulated: Mapped[bool] = mapped_column(Boolean, default=False)
    health: Mapped[str] = mapped_column(String(16))
    used_memory: Mapped[int] = mapped_column(BigInteger, default=0)
    exclusive_job: Mapped[int | None] = mapped_column(Integer)
    shared_jobs: Mapped[int] = mapped_column(Integer, default=0)
    version: Mapped[int] = mapped_column(Integer, default=0)
    numa: Mapped[int | None] = mapped_column(Integer)  # host NUMA node
    nvlink: Mapped[int | None] = mapped_column(Integer)  # NVLink domain on its node
    # bytes shares never take (node.gpu_memory_reserve); the applier's WHERE keeps them free
    memory_reserved: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    health_reason: Mapped[str | None] = mapped_column(Text)  # why health is not "ok"
    brand: Mapped[str | None] = mapped_column(String(32))  # container toolkit brand name
    arch: Mapped[str | None] = mapped_column(String(16))  # CUDA compute capability


class MigDeviceRow(Base):
    """A MIG device discovery found: a slice of GPU ``parent_uuid``.

    ``job_id`` is the job holding it: the applier sets it (conditionally, as it
    takes GPUs) and ``release_allocation`` clears it; a MIG job has no
    ``allocations`` row (the device is not a ``gpus`` row).
    """

    __tablename__ = "mig_devices"

    uuid: Mapped[str] = mapped_column(String(96), primary_key=True)
    node: Mapped[str] = mapped_column(ForeignKey("nodes.name"), index=True)
    parent_uuid: Mapped[str] = mapped_column(ForeignKey("gpus.uuid"), index=True)
    slot: Mapped[int] = mapped_column(Integer)
    profile: Mapped[str] = mapped_column(String(32))
    memory_total: Mapped[int] = mapped_column(BigInteger)
    gpu_instance: Mapped[int | None] = mapped_column(Integer)
    compute_instance: Mapped[int | None] = mapped_column(Integer)
    health: Mapped[str] = mapped_column(String(16), default="ok", server_default="ok")
    job_id: Mapped[int | None] = mapped_column(Integer)
    version: Mapped[int] = mapped_column(Integer, default=0, server_default="0")


class AllocationRow(Base):
    """One GPU held by one job. ``memory`` is None for an exclusive GPU."""

    __tablename__ = "allocations"
    __table_args__ = (UniqueConstraint("job_id", "gpu_uuid", name="allocation_job_gpu"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    node: Mapped[str] = mapped_column(String(128))
    gpu_uuid: Mapped[str] = mapped_column(ForeignKey("gpus.uuid"), index=True)
    memory: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[float] = mapped_column(Float)


class TokenRow(Base):
    """API tokens. Only a SHA-256 of each token is stored."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user: Mapped[str] = mapped_column(String(128), index=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)
    name: Mapped[str | None] = mapped_column(String(64))
    expires_at: Mapped[float | None] = mapped_column(Float)  # None: never
    last_used_at: Mapped[float | None] = mapped_column(Float)  # updated at most once a minute
    created_by: Mapped[str | None] = mapped_column(String(128))
    node: Mapped[str | None] = mapped_column(String(128))  # a node token: that node's agent only


class ClusterConfigRow(Base):
    """Each applied scheduling config (``store/cluster_config.py``); the newest is in force."""

    __tablename__ = "cluster_configs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    applied_at: Mapped[float] = mapped_column(Float)
    applied_by: Mapped[str] = mapped_column(String(128))  # a user, or "sighup"
    source: Mapped[str] = mapped_column(String(16))  # api | sighup
    document: Mapped[dict[str, object]] = mapped_column(JSON)


class RegistryCredentialRow(Base):
    """A user's own registry login (``store/registries.py``); ``secret`` is the
    password encrypted with the server's key (``gpudock.vault``)."""

    __tablename__ = "registry_credentials"
    __table_args__ = (UniqueConstraint("user", "registry", name="registry_credential_user"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(128))
    host: Mapped[str] = mapped_column("registry", String(255), index=True)  # the registry
    username: Mapped[str] = mapped_column(String(255))
    secret: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


Index("jobs_state_priority", JobRow.state, JobRow.priority, JobRow.submitted_at)
