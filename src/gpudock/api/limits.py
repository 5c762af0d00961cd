"""A cap on request bodies, enforced before any route reads them (``edge.py``).

A request whose ``Content-Length`` is over the limit gets 413 without its
body being read; a chunked body is counted as it streams and cut off with
413 once it passes the limit (the route never sees a partial body, because
the read raises first). The limit comes from ``api.max_body_bytes`` in the
server config.
"""

from __future__ import annotations

import json

from starlette.types import Send

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


async def refuse_too_large(send: Send, max_bytes: int) -> None:
    """Answer 413 ``PayloadTooLarge`` (and close the connection: the body is not read)."""
    message = too_large_message(max_bytes)
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
