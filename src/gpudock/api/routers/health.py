"""/healthz: liveness plus a summary; no auth so load balancers can probe it."""

from __future__ import annotations

from fastapi import APIRouter

from gpudock import __version__
from gpudock.api.deps import Ctx, Inventory
from gpudock.api.schemas import HealthOut
from gpudock.store import jobs as job_store

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthOut)
def healthz(ctx: Ctx, inventory: Inventory) -> HealthOut:
    node = next((n for n in inventory.nodes() if n.name == ctx.node_name), None)
    docker = "unknown" if node is None else node.status.value
    with ctx.db.read() as session:
        counts = job_store.count_by_state(session)
    return HealthOut(
        status="ok",
        version=__version__,
        node=ctx.node_name,
        instance=ctx.instance_id,
        docker=docker,
        jobs=counts,
    )
