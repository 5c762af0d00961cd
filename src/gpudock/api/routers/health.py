"""/healthz: liveness plus a summary; no auth so load balancers can probe it."""

from __future__ import annotations

import os

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from gpudock import __version__
from gpudock.api.deps import Ctx, Inventory
from gpudock.api.errors import DB_RETRY_AFTER
from gpudock.api.routing import OneHop
from gpudock.api.schemas import HealthOut
from gpudock.runtime.control import ask_role
from gpudock.store import jobs as job_store
from gpudock.store.db import database_unavailable

router = APIRouter(tags=["health"], route_class=OneHop)


@router.get(
    "/healthz",
    response_model=HealthOut,
    responses={503: {"model": HealthOut, "description": "the database is unavailable"}},
)
def healthz(ctx: Ctx, inventory: Inventory) -> HealthOut | JSONResponse:
    """200 with a summary and the server's role; 503 ``{"db": "unavailable"}`` while the
    database is down. A follower (``--standby``) answers 200 too: it serves the API."""
    addr = ctx.control_address
    health = HealthOut(
        status="ok",
        version=__version__,
        node=ctx.node_name,
        instance=ctx.instance_id,
        process=ctx.process,
        pid=os.getpid(),
        role="leader" if addr is None else ask_role(addr),
        docker="unknown",
        db="ok",
        jobs={},
    )
    try:
        node = next((n for n in inventory.nodes() if n.name == ctx.node_name), None)
        health.docker = "unknown" if node is None else node.status.value
        with ctx.db.read() as session:
            health.jobs = job_store.count_by_state(session)
    except SQLAlchemyError as exc:
        if not database_unavailable(exc):
            raise
        health.status, health.db = "unavailable", "unavailable"
        return JSONResponse(
            status_code=503,
            content=health.model_dump(),
            headers={"Retry-After": str(DB_RETRY_AFTER)},
        )
    return health
