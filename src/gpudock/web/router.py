"""Routes of the web dashboard: the page, its static files, login/logout, cluster JSON."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from html import escape
from pathlib import Path
from typing import Annotated

import orjson
from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from gpudock.api.deps import Auth, CurrentUser, TokenWatches, injected
from gpudock.api.routing import OneHop
from gpudock.core.errors import NotFound, Unauthorized
from gpudock.services.auth import UI_COOKIE, UI_HEADER, check_same_origin, refuse_node_token
from gpudock.services.dashboard import DashboardService

STATIC = Path(__file__).parent / "static"
ASSETS = {"app.js": "text/javascript", "app.css": "text/css", "favicon.svg": "image/svg+xml"}
router = APIRouter(prefix="/ui", include_in_schema=False, route_class=OneHop)
KEEPALIVE = 15.0  # seconds between two comments on an idle session stream (proxies)


class LoginIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    token: str = Field(min_length=1, max_length=512)


class WhoAmI(BaseModel):
    user: str
    admin: bool


@router.get("")
def page_redirect() -> RedirectResponse:
    return RedirectResponse("/ui/", status_code=307)


@router.get("/")
def page(request: Request, auth: Auth) -> HTMLResponse:
    """The single page; it shows the login form unless the cookie holds a valid token.

    With a valid cookie the ``<body>`` carries ``data-user``/``data-admin``, so
    the page starts drawing without a round trip to ``/ui/api/me``.
    """
    html = _index()
    token = request.cookies.get(UI_COOKIE)
    if token:
        try:
            who = auth.authenticate_token(token)
        except Unauthorized:
            pass
        else:
            body = f'<body data-user="{escape(who.user)}" data-admin="{int(who.is_admin)}">'
            html = html.replace("<body>", body, 1)
    return HTMLResponse(html, headers=_NO_STORE)


@router.get("/static/{name}")
def asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise NotFound(f"no UI file {name!r}")
    return FileResponse(STATIC / name, media_type=ASSETS[name], headers=_REVALIDATE)


@router.post("/login", response_model=WhoAmI)
def login(
    body: LoginIn,
    request: Request,
    response: Response,
    auth: Auth,
    ui_header: Annotated[str | None, Header(alias=UI_HEADER)] = None,
) -> WhoAmI:
    """Check the token and keep it in an HttpOnly, SameSite=Strict cookie."""
    check_same_origin(request.headers.get("host"), request.headers.get("origin"), ui_header)
    principal = auth.authenticate_token(body.token.strip())
    refuse_node_token(principal)
    response.set_cookie(
        UI_COOKIE,
        body.token.strip(),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return WhoAmI(user=principal.user, admin=principal.is_admin)


@router.post("/logout", status_code=204)
def logout() -> Response:
    """Clear the cookie (needs no valid token: an expired session can always log out)."""
    out = Response(status_code=204)
    out.delete_cookie(UI_COOKIE, path="/", httponly=True, samesite="strict")
    return out


@router.get("/api/me", response_model=WhoAmI)
def me(user: CurrentUser) -> WhoAmI:
    return WhoAmI(user=user.user, admin=user.is_admin)


@router.get("/api/session")
async def session(user: CurrentUser, watches: TokenWatches) -> StreamingResponse:
    """The page's session as server-sent events: a comment every ``KEEPALIVE`` seconds,
    and, when the token is revoked or expires, one ``ended`` event
    (``{"reason": "token revoked"}``) within a second, then the end of the stream."""
    watch, ended = watches.watch_async(user)

    async def events() -> AsyncIterator[str]:
        try:
            yield "retry: 2000\n\n"
            while True:
                try:
                    await asyncio.wait_for(ended.wait(), timeout=KEEPALIVE)
                except TimeoutError:
                    yield ": alive\n\n"
                    continue
                yield f"event: ended\ndata: {json.dumps({'reason': watch.reason})}\n\n"
                return
        finally:
            watch.cancel()

    return StreamingResponse(events(), media_type="text/event-stream", headers=_NO_STORE)


@router.get("/api/cluster")
def cluster(
    user: CurrentUser, service: Annotated[DashboardService, injected(DashboardService)]
) -> Response:
    """Every node and GPU with booking, readings and holders (see ``DashboardService``).

    Plain data, encoded by orjson (a large page, asked for on every poll), not
    by FastAPI's encoder.
    """
    return Response(orjson.dumps(service.cluster(user)), media_type="application/json")


_NO_STORE = {"Cache-Control": "no-store"}
_REVALIDATE = {"Cache-Control": "no-cache"}  # cached, but checked (ETag) on every load


@functools.cache
def _index() -> str:
    return (STATIC / "index.html").read_text()
