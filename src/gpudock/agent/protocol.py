"""What a node agent and the server say to each other (``POST /v1/agent/sync``).

The agent reports; the server answers with orders. The server's view of
which attempts run on the node is the authority: the agent kills what the
orders say, never what it guesses (except its lease, ``core/cluster.py``).

::

    agent                                             server
      list its node's gpudock containers  ──report──►  node token's node only
      (then NVML: GPUs, health, readings)              kill   = running, not assigned now
                                                       remove = stopped long ago, not assigned
      kill / remove them                  ◄──orders──  lease, interval, nonce, allocations
      fence by itself after ``lease`` s                 (a returning node's report that echoes
      without server and managers                        the nonce, with nothing to kill,
                                                         reopens it)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ReportedContainer(BaseModel):
    """One container with gpudock labels on the agent's node."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(max_length=128)
    name: str = Field(max_length=256)
    instance: str | None = Field(default=None, max_length=64)
    job: int | None = None
    attempt: int | None = None
    running: bool
    finished_at: float | None = Field(default=None, description="when it stopped (unix s)")


class ReportedGpu(BaseModel):
    """One GPU as the agent's NVML sees it."""

    model_config = ConfigDict(extra="forbid")

    uuid: str = Field(max_length=96)
    index: int = Field(ge=0)
    name: str = Field(max_length=128)
    memory_total: int = Field(ge=0)
    healthy: bool = True
    numa: int | None = None
    nvlink: int | None = None
    utilization: float | None = None  # 0..1
    memory_used: int | None = None
    temperature: float | None = None
    power: float | None = None


class AgentReport(BaseModel):
    """The agent's report: its containers (listed before it posts) and its GPUs."""

    model_config = ConfigDict(extra="forbid")

    node: str | None = Field(
        default=None,
        max_length=128,
        description="the node the agent runs on (gpudock's name); default: its token's node",
    )
    nonce: str | None = Field(
        default=None, max_length=64, description="the last nonce the server sent, echoed"
    )
    engine_ok: bool = Field(description="the node's Docker engine answered the listing")
    containers: list[ReportedContainer] = Field(default_factory=list, max_length=10000)
    gpus: list[ReportedGpu] | None = Field(
        default=None, max_length=64, description="NVML's view; null: NVML unavailable"
    )
    driver_version: str | None = Field(default=None, max_length=64)
    cuda_version: str | None = Field(default=None, max_length=32)
    fenced: list[str] = Field(
        default_factory=list,
        max_length=10000,
        description="containers the agent killed by itself (its lease ran out)",
    )


class HeldGpuOut(BaseModel):
    """A GPU (or a share of one) held by a job, for the agent's gauges."""

    uuid: str
    job: int
    user: str
    queue: str
    shared: bool
    memory: int | None = None


class AgentOrders(BaseModel):
    """The server's answer: what to stop, and how to behave until the next report."""

    instance: str = Field(description="the gpudock instance whose containers are watched")
    node: str
    interval: float = Field(description="seconds between reports")
    lease: float = Field(
        description="seconds without the server and every manager before the agent stops "
        "its node's containers by itself"
    )
    nonce: str | None = Field(description="echo it in the next report (a returning node)")
    kill: list[str] = Field(description="containers to kill now: not assigned to this node")
    remove: list[str] = Field(description="stopped containers of ended attempts, to remove")
    assigned: list[list[int]] = Field(description="[job, attempt] assigned to this node now")
    held: list[HeldGpuOut] = Field(description="the node's GPUs held by jobs (gauges)")


class EnrollRequest(BaseModel):
    """A Swarm agent task proving where it runs: its task id and node id (``{{.Task.ID}}``)."""

    model_config = ConfigDict(extra="forbid")

    node_id: str = Field(min_length=1, max_length=64)
    task_id: str = Field(min_length=1, max_length=64)


class EnrollOut(BaseModel):
    node: str = Field(description="the node's gpudock name")
    token: str = Field(description="a node token: it acts only for this node's agent")
