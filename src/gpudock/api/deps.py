"""FastAPI dependencies: the shared context, services and the caller's principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from gpudock.runtime.context import RuntimeContext
from gpudock.services.auth import UI_COOKIE, UI_HEADER, AuthService
from gpudock.services.inventory import InventoryService
from gpudock.services.jobs import JobService
from gpudock.services.queues import QueueService
from gpudock.store.tokens import Principal


def get_ctx(request: Request) -> RuntimeContext:
    ctx: RuntimeContext = request.app.state.ctx
    return ctx


def get_jobs(ctx: Annotated[RuntimeContext, Depends(get_ctx)]) -> JobService:
    return JobService(ctx)


def get_inventory(ctx: Annotated[RuntimeContext, Depends(get_ctx)]) -> InventoryService:
    return InventoryService(ctx)


def get_queues(ctx: Annotated[RuntimeContext, Depends(get_ctx)]) -> QueueService:
    return QueueService(ctx)


def get_auth(ctx: Annotated[RuntimeContext, Depends(get_ctx)]) -> AuthService:
    return AuthService(ctx)


def get_principal(
    request: Request,
    auth: Annotated[AuthService, Depends(get_auth)],
    authorization: Annotated[str | None, Header()] = None,
) -> Principal:
    """The bearer token's principal; without an Authorization header, the UI's cookie's."""
    cookie = request.cookies.get(UI_COOKIE) if authorization is None else None
    if cookie:
        headers = request.headers
        return auth.authenticate_cookie(
            cookie,
            request.method,
            headers.get("host"),
            headers.get("origin"),
            headers.get(UI_HEADER),
        )
    return auth.authenticate(authorization)


CurrentUser = Annotated[Principal, Depends(get_principal)]
Jobs = Annotated[JobService, Depends(get_jobs)]
Inventory = Annotated[InventoryService, Depends(get_inventory)]
Auth = Annotated[AuthService, Depends(get_auth)]
Queues = Annotated[QueueService, Depends(get_queues)]
Ctx = Annotated[RuntimeContext, Depends(get_ctx)]
