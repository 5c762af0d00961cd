"""FastAPI dependencies: the shared context, services and the caller's principal."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request, Security
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpudock.runtime.context import RuntimeContext
from gpudock.services.auth import UI_COOKIE, UI_HEADER, AuthService
from gpudock.services.inventory import InventoryService
from gpudock.services.jobs import JobService
from gpudock.services.queues import QueueService
from gpudock.services.token_watch import TokenWatch
from gpudock.store.tokens import Principal


def get_ctx(request: Request) -> RuntimeContext:
    ctx: RuntimeContext = request.app.state.ctx
    return ctx


def get_token_watch(request: Request) -> TokenWatch:
    """This process's watcher of the tokens of open sessions (``services/token_watch.py``)."""
    watch: TokenWatch = request.app.state.token_watch
    return watch


def get_jobs(ctx: Annotated[RuntimeContext, Depends(get_ctx)]) -> JobService:
    return JobService(ctx)


def get_inventory(ctx: Annotated[RuntimeContext, Depends(get_ctx)]) -> InventoryService:
    return InventoryService(ctx)


def get_queues(ctx: Annotated[RuntimeContext, Depends(get_ctx)]) -> QueueService:
    return QueueService(ctx)


def get_auth(ctx: Annotated[RuntimeContext, Depends(get_ctx)]) -> AuthService:
    return AuthService(ctx)


# Declares the OpenAPI ``bearer`` scheme (so /docs' "Authorize" takes a token); it
# never answers itself: ``AuthService.authenticate`` reads the raw header and words
# every 401.
bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A gpudock API token: `Authorization: Bearer <token>`.",
)


def get_principal(
    request: Request,
    auth: Annotated[AuthService, Depends(get_auth)],
    _: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    authorization: Annotated[str | None, Header(include_in_schema=False)] = None,
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
TokenWatches = Annotated[TokenWatch, Depends(get_token_watch)]
