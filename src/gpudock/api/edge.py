"""The API's one middleware: request ids, the doc pages' policy and the body limit.

``Edge`` is a plain ASGI middleware that does, with one wrapper around
``send`` (and one around ``receive`` only for a request that may carry a body):

* request ids (``request_id.py``): keep a usable incoming ``X-Request-ID`` or
  make one, set it for the request's log records, return it in the response
  header, and log the request at DEBUG;
* the ``Content-Security-Policy`` of the doc pages (``docs.py``);
* the body limit (``limits.py``): a declared ``Content-Length`` over
  ``max_bytes`` is refused with 413 before the body is read; a streamed body
  is counted and cut off with 413 once it passes the limit;
* ``loop_reads`` (an app on SQLite): ``routing.LOOP_READS`` is set for the
  request, so its quick reads run on the loop (``routing.py``).

One layer instead of three: each layer that wraps ``send`` costs every
request a closure call per message.
"""

from __future__ import annotations

import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpudock.api.docs import DOC_PAGES, POLICY
from gpudock.api.limits import BodyTooLarge, refuse_too_large
from gpudock.api.request_id import choose_request_id
from gpudock.api.routing import LOOP_READS
from gpudock.logfmt import request_id

log = logging.getLogger("gpudock.api")

_RID = b"x-request-id"
_CSP = (b"content-security-policy", POLICY.encode())


class Edge:
    """Request ids, the doc pages' policy and the body limit, as one ASGI layer."""

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        pages: frozenset[str] = DOC_PAGES,
        loop_reads: bool = False,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.pages = pages
        self.loop_reads = loop_reads

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming, declared, chunked = None, None, False
        for name, value in scope["headers"]:
            if name == _RID:
                incoming = value.decode("latin-1")
            elif name == b"content-length":
                declared = _int(value)
            elif name == b"transfer-encoding":
                chunked = True
        rid = choose_request_id(incoming)
        # Not reset afterwards: each request runs in its own task (and context), and the
        # outermost error handler must still see the id when it logs a failure.
        request_id.set(rid)
        if self.loop_reads:
            LOOP_READS.set(True)  # this request's task only, as ``request_id``
        started, status = time.monotonic(), 0
        extra = [(_RID, rid.encode("latin-1"))]
        if scope["path"] in self.pages:
            extra.append(_CSP)

        async def edge_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        if declared is not None and declared > self.max_bytes:
            await refuse_too_large(edge_send, self.max_bytes)
        else:
            # Only a request that declares a body, or streams one, has it counted.
            counted = self._counting(receive) if chunked or declared else receive
            try:
                await self.app(scope, counted, edge_send)
            except BodyTooLarge:
                if not status:  # once the response began, nothing more can be said
                    await refuse_too_large(edge_send, self.max_bytes)
        log.debug(
            "%s %s -> %d in %.1f ms",
            scope["method"],
            scope["path"],
            status,
            (time.monotonic() - started) * 1000,
        )

    def _counting(self, receive: Receive) -> Receive:
        """``receive`` that raises ``BodyTooLarge`` once the body passes ``max_bytes``."""
        seen = 0

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        return counted_receive


def _int(value: bytes) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None
