"""Response and request models of the REST API (OpenAPI at /docs)."""

from __future__ import annotations

from pydantic import BaseModel, Field, StrictFloat, StrictInt

from gpudock.core.inventory import Gpu, MigDevice, Node
from gpudock.core.job import Job, JobSpec
from gpudock.core.spec_schema import EXPIRES_PATTERN, TOKEN_NAME_PATTERN, USER_PATTERN
from gpudock.services.auth import MAX_EXPIRES
from gpudock.store.tokens import TokenInfo


class PendingReasonOut(BaseModel):
    layer: str
    message: str
    counterfactual: str | None = None


class AllocationOut(BaseModel):
    node: str
    gpus: list[str]
    memory_per_gpu: int | None = Field(
        description="bytes per GPU for shared jobs; null = whole GPUs"
    )


class GangPartOut(BaseModel):
    rank: int
    node: str
    gpus: list[str]


class JobOut(BaseModel):
    id: int
    name: str | None
    user: str
    queue: str
    priority: int
    state: str
    reason: str | None
    pending_reasons: list[PendingReasonOut]
    attempt: int
    submitted_at: float
    allocated_at: float | None
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    node: str | None
    gpus: list[str] = Field(description="GPU UUIDs the current or last attempt was given")
    container: str | None
    allocation: AllocationOut | None = Field(description="what the job holds now")
    gang: list[GangPartOut] = Field(
        default_factory=list,
        description="a placed multi-node gang's parts in rank order (empty otherwise)",
    )
    cancel_requested: bool
    array_id: int | None = Field(default=None, description="its job array (first task's id)")
    array_index: int | None = Field(default=None, description="its index in the array")
    held_by: str | None = Field(default=None, description="who holds it (gpudock hold)")
    held_at: float | None = Field(default=None, description="since when it is held")
    gpu_layers: list[str] = Field(
        default_factory=list,
        description="what holds a shared job to its GPU memory share, strongest first: "
        "mps (the driver's limit), watchdog (stopped past it), hints (framework env); "
        "mig for a MIG device (the hardware's partition); empty for whole GPUs",
    )
    spec: JobSpec

    @classmethod
    def of(cls, job: Job) -> JobOut:
        allocation = None
        if job.gpu_uuids and job.node and job.state.holds_resources:
            allocation = AllocationOut(
                node=job.node, gpus=list(job.gpu_uuids), memory_per_gpu=job.gpu_memory_per_gpu
            )
        return cls(
            id=job.id,
            name=job.spec.name,
            user=job.user,
            queue=job.spec.queue,
            priority=job.spec.priority,
            state=job.state.value,
            reason=job.reason,
            pending_reasons=[PendingReasonOut(**r.to_dict()) for r in job.pending_reasons],  # type: ignore[arg-type]
            attempt=job.attempt,
            submitted_at=job.submitted_at,
            allocated_at=job.allocated_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            exit_code=job.exit_code,
            node=job.node,
            gpus=list(job.gpu_uuids),
            container=job.container_name if job.state.value in ("STARTING", "RUNNING") else None,
            allocation=allocation,
            gang=[
                GangPartOut(rank=rank, node=part.node, gpus=list(part.gpu_uuids))
                for rank, part in enumerate(job.gang)
            ],
            cancel_requested=job.cancel_requested,
            array_id=job.array_id,
            array_index=job.array_index,
            held_by=job.held_by,
            held_at=job.held_at,
            gpu_layers=list(job.gpu_layers),
            spec=job.spec,
        )


class JobEventOut(BaseModel):
    at: float
    attempt: int
    from_state: str | None = Field(alias="from")
    to: str
    reason: str | None

    model_config = {"populate_by_name": True}


class PreemptionOut(BaseModel):
    """What the scheduler's preemption rules say about a job that holds GPUs."""

    preemptible: bool = Field(description="false: the job is never preempted")
    protected_until: float | None = Field(
        description="epoch seconds its protection after its last (re)start ends; null: "
        "not protected now (min_runtime, scheduler.preemption.exempt_time)"
    )
    protected_for: float | None = Field(description="seconds each run is protected; null: none")
    restart_cost_s: float = Field(
        description="seconds a preemption now would charge it: restart plus lost work"
    )
    lost_work_s: float = Field(description="of which the run since its last checkpoint")


class JobDetailOut(JobOut):
    events: list[JobEventOut]
    preemption: PreemptionOut | None = Field(
        default=None, description="while it holds GPUs: its protection and restart cost"
    )


class ReservedForOut(BaseModel):
    job: int | None = Field(description="the reserving job; null when it is another user's")
    user: str | None = Field(description="its owner; null when it is another user's")
    eta: float | None = Field(description="expected start, epoch seconds; null = unknown")


class MigDeviceOut(BaseModel):
    uuid: str = Field(description="MIG-...: what a MIG job's container is given")
    slot: int = Field(description="its place among the GPU's MIG devices")
    profile: str = Field(description="e.g. 1g.10gb")
    memory_total: int
    gpu_instance: int | None
    compute_instance: int | None
    job: int | None = Field(description="the job holding it; null: free")

    @classmethod
    def of(cls, mig: MigDevice) -> MigDeviceOut:
        return cls(
            uuid=mig.uuid,
            slot=mig.slot,
            profile=mig.profile,
            memory_total=mig.memory_total,
            gpu_instance=mig.gpu_instance,
            compute_instance=mig.compute_instance,
            job=mig.job,
        )


class GpuOut(BaseModel):
    uuid: str
    node: str
    index: int
    name: str
    memory_total: int
    memory_reserved: int = Field(default=0, description="bytes memory shares never take")
    used_memory: int
    mig_mode: bool | None
    emulated: bool
    health: str = Field(description="ok, unhealthy, missing, quarantined or cordoned")
    health_reason: str | None = Field(
        default=None, description="why it is not ok: the XID that quarantined it, who cordoned it"
    )
    brand: str | None = Field(default=None, description="tesla, nvidia, geforce...; null: unknown")
    arch: str | None = Field(default=None, description="CUDA compute capability, e.g. 9.0")
    mig_devices: list[MigDeviceOut] = Field(
        default_factory=list, description="its MIG devices (MIG mode on)"
    )
    exclusive_job: int | None
    shared_jobs: int
    numa: int | None = Field(description="host NUMA node; null = unknown")
    nvlink: int | None = Field(
        description="NVLink domain on its node (equal ids are NVLink-connected); null = none"
    )
    reserved_for: ReservedForOut | None = Field(
        default=None, description="kept for a pending job by the last scheduling cycle"
    )

    @classmethod
    def of(cls, gpu: Gpu, migs: list[MigDevice] | None = None) -> GpuOut:
        return cls(
            uuid=gpu.uuid,
            node=gpu.node,
            index=gpu.index,
            name=gpu.name,
            memory_total=gpu.memory_total,
            used_memory=gpu.used_memory,
            mig_mode=gpu.mig_mode,
            emulated=gpu.emulated,
            health=gpu.health.value,
            exclusive_job=gpu.exclusive_job,
            shared_jobs=gpu.shared_jobs,
            numa=gpu.numa,
            nvlink=gpu.nvlink,
            memory_reserved=gpu.memory_reserved,
            health_reason=gpu.health_reason,
            brand=gpu.brand,
            arch=gpu.arch,
            mig_devices=[MigDeviceOut.of(m) for m in migs or ()],
        )


class NodeOut(BaseModel):
    name: str
    status: str
    status_reason: str | None
    driver_version: str | None
    cuda_version: str | None
    gpu_source: str
    last_seen: float
    labels: dict[str, str] = Field(description="matched by a job's node_selector")
    taints: list[str] = Field(description="'key=value:NoSchedule'; jobs must tolerate each")
    cpus: float | None = Field(description="CPU cores offered to jobs; null = not scheduled")
    cpus_used: float = Field(description="CPU cores requested by the jobs holding resources")
    memory: int | None = Field(
        default=None, description="host memory bytes offered to jobs; null = not scheduled"
    )
    memory_used: int = Field(
        default=0, description="host memory bytes requested by the jobs holding resources"
    )
    gpu_sharing: str | None = Field(
        default=None, description="exclusive, mps or time-slice; null: not known yet"
    )
    gpus_total: int
    gpus_idle: int
    gpus: list[GpuOut]
    engine_state: str | None = Field(
        default=None, description="Swarm: ready, down, unknown, disconnected or removed"
    )
    availability: str | None = Field(default=None, description="Swarm: active, pause or drain")
    agent: str | None = Field(
        default=None,
        description="Swarm: watched (its node agent reports: fenced), silent (it did, not "
        "lately) or unwatched (no agent: unfenced; its lost jobs wait for the operator)",
    )
    agent_seen_at: float | None = Field(default=None, description="its agent's last report")
    fencing: bool = Field(
        default=False, description="back after a loss; closed until its agent confirms fencing"
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="configuration problems, e.g. too few CPUs for its GPUs under job_defaults",
    )

    @classmethod
    def of(cls, node: Node, warnings: list[str] | None = None) -> NodeOut:
        return cls(
            warnings=warnings or [],
            name=node.name,
            status=node.status.value,
            status_reason=node.status_reason,
            driver_version=node.driver_version,
            cuda_version=node.cuda_version,
            gpu_source=node.gpu_source,
            last_seen=node.last_seen,
            labels=node.labels,
            taints=node.taints,
            cpus=node.cpus,
            cpus_used=node.cpus_used,
            memory=node.memory,
            memory_used=node.memory_used,
            gpu_sharing=node.gpu_sharing,
            gpus_total=len(node.gpus),
            gpus_idle=sum(1 for g in node.gpus if g.idle and g.health.value == "ok"),
            gpus=[
                GpuOut.of(g, [m for m in node.mig_devices if m.parent_uuid == g.uuid])
                for g in node.gpus
            ],
            engine_state=node.engine_state,
            availability=node.availability,
            agent=node.agent,
            agent_seen_at=node.agent_seen_at,
            fencing=node.fencing,
        )


class TokenCreate(BaseModel):
    model_config = {"extra": "forbid"}

    user: str | None = Field(
        default=None,
        description="1-64 letters, digits, '_', '.', '@', '-'; required unless node is given",
        json_schema_extra={"pattern": USER_PATTERN},
    )
    admin: bool = Field(default=False, strict=True)
    node: str | None = Field(
        default=None,
        max_length=128,
        description="a node token: it acts only for this registered node's agent",
    )
    name: str | None = Field(
        default=None,
        description="a label, e.g. laptop: 1-64 letters, digits, spaces or '_.@:+-'",
        json_schema_extra={
            "anyOf": [{"type": "string", "pattern": TOKEN_NAME_PATTERN}, {"type": "null"}]
        },
    )
    expires: str | StrictInt | StrictFloat | None = Field(  # a boolean is not a lifetime
        default=None,
        description="lifetime: a positive duration such as 30d, 12h or 1h30m, or seconds, "
        "at most ten years (3650d); null: never expires",
        json_schema_extra={
            "anyOf": [
                {"type": "string", "pattern": EXPIRES_PATTERN},
                {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_EXPIRES},
                {"type": "null"},
            ]
        },
    )


class TokenInfoOut(BaseModel):
    """A token without its secret."""

    id: int
    name: str | None
    user: str
    admin: bool
    state: str = Field(description="active, expired or revoked")
    created_at: float
    created_by: str | None = Field(description="who created it; null: the server, or unknown")
    expires_at: float | None = Field(description="null: never expires")
    last_used_at: float | None = Field(description="updated at most once a minute")
    revoked_at: float | None
    node: str | None = Field(default=None, description="a node token's node")

    @classmethod
    def of(cls, info: TokenInfo, now: float) -> TokenInfoOut:
        return cls(
            id=info.id,
            name=info.name,
            user=info.user,
            admin=info.is_admin,
            state=info.state(now),
            created_at=info.created_at,
            created_by=info.created_by,
            expires_at=info.expires_at,
            last_used_at=info.last_used_at,
            revoked_at=info.revoked_at,
            node=info.node,
        )


class TokenOut(TokenInfoOut):
    """A new token: the secret is in ``token``, shown this once."""

    token: str


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorOut(BaseModel):
    error: ErrorBody


class HealthOut(BaseModel):
    status: str = Field(description="ok, or unavailable while the database is down")
    version: str
    node: str
    instance: str
    process: str = Field(
        description="the process that answered: api-1, api-2, ... (server: one process)"
    )
    pid: int = Field(description="its process id")
    role: str = Field(
        description="leader (this server runs the database's controller), follower (a "
        "--standby serving the API while it waits to lead), or unknown (its controller "
        "process did not answer)"
    )
    docker: str
    db: str = Field(description="ok or unavailable")
    jobs: dict[str, int] = Field(description="jobs per state; empty while the database is down")
