"""JSON bodies must hold text: a lone UTF-16 surrogate (``"\\ud800"``) is refused with 422.

A lone surrogate escape is valid JSON syntax, and Python's parser turns it
into a string that is no Unicode text: it cannot be encoded as UTF-8, so it
could be neither stored nor sent back (a job holding one would answer 500 on
every listing). ``JsonText`` is a plain ASGI middleware in front of the
routes: a JSON body that holds such an escape is parsed once, and one whose
strings keep a lone surrogate gets 422 naming the field; every other body
passes on unchanged (read once and handed to the route as it was).
"""

from __future__ import annotations

import json
import re
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class JsonText:
    """Refuse JSON request bodies whose strings hold a lone surrogate (422, the field)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _is_json(scope):
            await self.app(scope, receive, send)
            return
        first = await receive()
        chunks = [first.get("body", b"")]
        more = first["type"] == "http.request" and first.get("more_body", False)
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        field = lone_surrogate(body) if _ESCAPE.search(body) else None
        if field is not None:
            await _refuse(send, *field)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def lone_surrogate(body: bytes) -> tuple[str, int] | None:
    """``(field, code point)`` of the first string holding a lone surrogate, or None
    (none, or not JSON at all: the route says why)."""
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return _find(value, "")


def _find(value: Any, path: str) -> tuple[str, int] | None:
    if isinstance(value, str):
        bad = next((ord(c) for c in value if 0xD800 <= ord(c) <= 0xDFFF), None)
        return None if bad is None else (path or "body", bad)
    if isinstance(value, dict):
        for key, item in value.items():
            found = _find(key, path or "body") or _find(item, f"{path}.{key}" if path else key)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _find(item, f"{path}.{index}" if path else str(index))
            if found is not None:
                return found
    return None


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            media = bytes(value).split(b";")[0].strip().lower()
            return media == b"application/json" or media.endswith(b"+json")
    return False


async def _refuse(send: Send, field: str, code: int) -> None:
    message = (
        f"{field}: holds a lone UTF-16 surrogate (\\u{code:04x}), which is no Unicode "
        "character; send text (UTF-8, or \\u escapes of whole characters)"
    )
    body = json.dumps({"error": {"code": "InvalidInput", "message": message, "field": field}})
    await send(
        {
            "type": "http.response.start",
            "status": 422,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body.encode()})
