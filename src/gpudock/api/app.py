"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from gpudock import __version__, web
from gpudock.api import openapi
from gpudock.api.edge import Edge
from gpudock.api.errors import install_error_handlers
from gpudock.api.json_text import JsonText
from gpudock.api.routers import (
    admin,
    agent,
    estimates,
    events,
    gpu_admin,
    health,
    inventory,
    jobs,
    metrics,
    queues,
    tokens,
)
from gpudock.api.routers.job_controls import router as job_controls_router
from gpudock.api.routers.registries import router as registries_router
from gpudock.runtime.context import RuntimeContext
from gpudock.runtime.controller import Controller
from gpudock.services.token_watch import TokenWatch


def create_app(ctx: RuntimeContext, controller: Controller | None = None) -> FastAPI:
    """An app serving ``ctx``; if ``controller`` is given it runs for the app's lifetime."""

    token_watch = TokenWatch(ctx)  # ends the open sessions of revoked or expired tokens

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if controller is not None:
            controller.start()
        try:
            yield
        finally:
            token_watch.close()
            if controller is not None:
                controller.stop()

    # /docs and /redoc load Swagger UI and ReDoc from the server itself (api/docs.py).
    app = FastAPIOffline(
        # gpudock exports Prometheus metrics, not OpenTelemetry: FastAPI's native telemetry
        # would look its providers up in the environment on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
        title="gpudock",
        version=__version__,
        description="GPU cluster manager for Docker containers.",
        lifespan=lifespan,
    )
    app.state.ctx = ctx
    app.state.token_watch = token_watch
    app.add_middleware(JsonText)  # inside Edge: reads only what the body limit let through
    # ids, CSP, body limit; quick reads on the loop when the store is SQLite (routing.py)
    app.add_middleware(Edge, max_bytes=ctx.config.api.max_body_bytes, loop_reads=ctx.db.is_sqlite)
    install_error_handlers(app)
    app.include_router(estimates.router)  # before jobs': /v1/jobs/estimates is no job id
    for router in (jobs.router, inventory.router, queues.router, tokens.router, health.router):
        app.include_router(router)
    app.include_router(metrics.router)
    app.include_router(events.router)
    app.include_router(admin.router)
    app.include_router(gpu_admin.router)
    app.include_router(job_controls_router)
    app.include_router(registries_router)
    app.include_router(agent.router)
    app.include_router(web.router)
    openapi.install(app)
    return app
