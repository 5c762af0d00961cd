"""A cap on request bodies, enforced before any route reads them.

``BodyLimit`` is a plain ASGI middleware: a request whose ``Content-Length``
is over the limit gets 413 without its body being read; a chunked body is
counted as it streams and cut off with 413 once it passes the limit (the
route never sees a partial body, because the read raises first). The limit
comes from ``api.max_body_bytes`` in the server config.
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpudock.core.units import format_size


class BodyTooLarge(Exception):
    """Raised inside ``receive`` once a streamed body passes the limit.

    FastAPI wraps errors raised while it reads a body into a 400; the API's
    error handler recognises this cause and answers 413 instead
    (``too_large_message``).
    """

    def __init__(self, max_bytes: int) -> None:
        super().__init__(too_large_message(max_bytes))
        self.max_bytes = max_bytes


def too_large_message(max_bytes: int) -> str:
    return (
        f"request body is larger than the server's limit of {format_size(max_bytes)} "
        f"({max_bytes} bytes; api.max_body_bytes)"
    )


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413 ``PayloadTooLarge``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        message = too_large_message(self.max_bytes)
        body = json.dumps(
            {"error": {"code": "PayloadTooLarge", "message": message, "field": "body"}}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
