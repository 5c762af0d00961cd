"""FastAPI dependencies: the shared context, services and the caller's principal.

None does I/O and each is ``async def``, so resolving them takes no thread
hop (``routing.py``). The principal comes from this process's token cache
when it can (``AuthService.cached_principal``); only a miss reads the store,
in one hop of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request, Security
from fastapi.security import HTTPBearer
from starlette.concurrency import run_in_threadpool

from gpudock.core.errors import Forbidden
from gpudock.runtime.context import RuntimeContext
from gpudock.services.auth import (
    UI_COOKIE,
    UI_HEADER,
    AuthService,
    bearer_token,
    cookie_token,
    refuse_node_token,
)
from gpudock.services.inventory import InventoryService
from gpudock.services.jobs import JobService
from gpudock.services.queues import QueueService
from gpudock.services.token_watch import TokenWatch
from gpudock.store.tokens import Principal

Service = TypeVar("Service")


async def get_ctx(request: Request) -> RuntimeContext:
    ctx: RuntimeContext = request.app.state.ctx
    return ctx


async def get_token_watch(request: Request) -> TokenWatch:
    """This process's watcher of the tokens of open sessions (``services/token_watch.py``)."""
    watch: TokenWatch = request.app.state.token_watch
    return watch


def injected(make: Callable[[RuntimeContext], Service]) -> Any:
    """A dependency giving ``make(ctx)``: ``Annotated[JobService, injected(JobService)]``."""

    async def build(request: Request) -> Service:
        return make(request.app.state.ctx)

    build.__name__ = f"get_{getattr(make, '__name__', 'service')}"
    return Depends(build)


class BearerPrincipal(HTTPBearer):
    """The caller's ``Principal``: the bearer token's, or without an Authorization header,
    the UI's cookie's.

    Also the OpenAPI ``bearer`` scheme (so /docs' "Authorize" takes a token):
    being an ``HTTPBearer``, FastAPI documents it as the security of every
    operation that depends on it. It words every 401 itself
    (``AuthService``), never FastAPI's. A node token is refused (403): it acts
    only for its node's agent (``AgentBearer``).
    """

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        principal = await self.principal(request)
        refuse_node_token(principal)
        return principal

    @staticmethod
    async def principal(request: Request) -> Principal:
        """The request's principal, from this process's token cache when it can."""
        auth = AuthService(request.app.state.ctx)
        headers = request.headers
        authorization = headers.get("authorization")
        cookie = request.cookies.get(UI_COOKIE) if authorization is None else None
        if cookie:
            host, origin = headers.get("host"), headers.get("origin")
            token = cookie_token(cookie, request.method, host, origin, headers.get(UI_HEADER))
        else:
            token = bearer_token(authorization)
        principal = auth.cached_principal(token)
        if principal is None:
            principal = await run_in_threadpool(auth.authenticate_token, token)
        return principal


bearer = BearerPrincipal(
    auto_error=False,
    scheme_name="bearer",
    description="A gpudock API token: `Authorization: Bearer <token>`.",
)


class AgentBearer(BearerPrincipal):
    """A node token's principal (an agent); any other token is refused (403)."""

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        principal = await self.principal(request)
        if principal.node is None:
            raise Forbidden(
                "only a node token (gpudock token create --node NODE) may act as an agent"
            )
        return principal


agent_bearer = AgentBearer(  # the same OpenAPI scheme as ``bearer``
    auto_error=False,
    scheme_name="bearer",
    description="A gpudock API token: `Authorization: Bearer <token>`.",
)

CurrentUser = Annotated[Principal, Security(bearer)]
AgentPrincipal = Annotated[Principal, Security(agent_bearer)]
Jobs = Annotated[JobService, injected(JobService)]
Inventory = Annotated[InventoryService, injected(InventoryService)]
Auth = Annotated[AuthService, injected(AuthService)]
Queues = Annotated[QueueService, injected(QueueService)]
Ctx = Annotated[RuntimeContext, Depends(get_ctx)]
TokenWatches = Annotated[TokenWatch, Depends(get_token_watch)]
