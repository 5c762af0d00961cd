"""/v1/agent: node agents report and enroll; /v1/nodes/{name}: drain, cordon, uncordon;
/v1/swarm/agent: deploy the agent as a Swarm service (``services/agent.py``, ``nodes.py``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from gpudock.agent.protocol import AgentOrders, AgentReport, EnrollOut, EnrollRequest
from gpudock.api.deps import AgentPrincipal, Ctx, CurrentUser
from gpudock.api.schemas import ErrorOut, NodeOut
from gpudock.services.agent import AgentService
from gpudock.services.nodes import NodeControls

router = APIRouter(tags=["cluster"])
_ERRORS: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorOut, "description": "a token of another node, or not an admin"},
    404: {"model": ErrorOut, "description": "an unknown node"},
    409: {"model": ErrorOut, "description": "not a multi-node backend, or already so"},
}


@router.post("/v1/agent/sync", response_model=AgentOrders, responses=_ERRORS)
def sync(report: AgentReport, agent: AgentPrincipal, ctx: Ctx) -> AgentOrders:
    """A node agent's report (its containers, GPUs and readings); the answer says what to
    stop. A node token acts only for its own node."""
    return AgentService(ctx).sync(agent, report)


@router.post("/v1/agent/enroll", response_model=EnrollOut, responses=_ERRORS)
def enroll(body: EnrollRequest, agent: AgentPrincipal, ctx: Ctx) -> EnrollOut:
    """A Swarm agent task (enrollment token) proves its node by its task id and gets that
    node's token."""
    return AgentService(ctx).enroll(agent, body)


class DeployAgent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    image: str = Field(
        min_length=1, max_length=512, description="an image whose entrypoint is gpudock"
    )
    server_url: str = Field(
        min_length=1,
        max_length=512,
        description="the URL the agents reach the server at; or every replica's, comma-separated",
    )
    docker_socket: str = Field(
        default="/var/run/docker.sock",
        pattern=r"^/",
        max_length=512,
        description="each node's Docker engine socket (an absolute path on every host)",
    )


class DeployedOut(BaseModel):
    service: str


@router.post("/v1/swarm/agent", response_model=DeployedOut, responses=_ERRORS)
def deploy_agent(body: DeployAgent, user: CurrentUser, ctx: Ctx) -> DeployedOut:
    """Run the node agent on every Swarm node (a global service; admins only)."""
    service = AgentService(ctx).deploy(user, body.image, body.server_url, body.docker_socket)
    return DeployedOut(service=service)


@router.post("/v1/nodes/{name}/drain", response_model=NodeOut, responses=_ERRORS)
def drain_node(name: str, user: CurrentUser, ctx: Ctx) -> NodeOut:
    """Drain a node: no new jobs land there; its running jobs go on (admins)."""
    return NodeOut.of(NodeControls(ctx).set_availability(name, "drain", user))


@router.post("/v1/nodes/{name}/cordon", response_model=NodeOut, responses=_ERRORS)
def cordon_node(name: str, user: CurrentUser, ctx: Ctx) -> NodeOut:
    """Cordon a node (Swarm's pause): no new jobs; its running jobs go on (admins)."""
    return NodeOut.of(NodeControls(ctx).set_availability(name, "cordon", user))


@router.post("/v1/nodes/{name}/uncordon", response_model=NodeOut, responses=_ERRORS)
def uncordon_node(name: str, user: CurrentUser, ctx: Ctx) -> NodeOut:
    """Let a drained or cordoned node take new jobs again (admins)."""
    return NodeOut.of(NodeControls(ctx).set_availability(name, "uncordon", user))
