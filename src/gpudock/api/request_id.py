"""Request ids: every request gets one, in its response and in its log records.

The API's middleware (``edge.py``) keeps an incoming
``X-Request-ID`` when it is 1-128 visible ASCII characters (else it makes
a new one: 32 hex digits), sets it in ``gpudock.logfmt.request_id`` for the
request's log records (the JSON log's ``request_id``), returns it in the
``X-Request-ID`` response header, and logs each request at DEBUG.
"""

from __future__ import annotations

import re
import uuid

HEADER = "X-Request-ID"
_VALID = re.compile(r"^[\x21-\x7e]{1,128}$")


def choose_request_id(incoming: str | None) -> str:
    """The caller's id when it is usable, else a fresh one."""
    if incoming is not None and _VALID.fullmatch(incoming):
        return incoming
    return uuid.uuid4().hex
