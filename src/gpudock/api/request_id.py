"""Request ids: every request gets one, in its response and in its log records.

``RequestId`` is a plain ASGI middleware. It keeps an incoming
``X-Request-ID`` when it is 1-128 visible ASCII characters (else it makes
a new one: 32 hex digits), sets it in ``gpudock.logfmt.request_id`` for the
request's log records (the JSON log's ``request_id``), returns it in the
``X-Request-ID`` response header, and logs each request at DEBUG.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpudock.logfmt import request_id

HEADER = "X-Request-ID"
_VALID = re.compile(r"^[\x21-\x7e]{1,128}$")

log = logging.getLogger("gpudock.api")


def choose_request_id(incoming: str | None) -> str:
    """The caller's id when it is usable, else a fresh one."""
    if incoming is not None and _VALID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex


class RequestId:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = next(
            (v.decode("latin-1") for k, v in scope["headers"] if k == b"x-request-id"), None
        )
        rid = choose_request_id(incoming)
        # Not reset afterwards: each request runs in its own task (and context), and the
        # outermost error handler must still see the id when it logs a failure.
        request_id.set(rid)
        started = time.monotonic()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                MutableHeaders(scope=message)[HEADER] = rid
            await send(message)

        await self.app(scope, receive, send_with_id)
        log.debug(
            "%s %s -> %d in %.1f ms",
            scope["method"],
            scope["path"],
            status,
            (time.monotonic() - started) * 1000,
        )
