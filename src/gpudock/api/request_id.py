"""Request ids: every request gets one, in its response and in its log records.

The API's middleware (``edge.py``) keeps an incoming
``X-Request-ID`` when it is 1-128 visible ASCII characters (else it makes
a new one: 32 hex digits), sets it in ``gpudock.logfmt.request_id`` for the
request's log records (the JSON log's ``request_id``), returns it in the
``X-Request-ID`` response header, and logs each request at DEBUG.
"""

from __future__ import annotations

import itertools
import os
import re

HEADER = "X-Request-ID"
_VALID = re.compile(r"^[\x21-\x7e]{1,128}$")


_PREFIX = os.urandom(8).hex()  # this process's; made again in a forked worker
_COUNTER = itertools.count()


def choose_request_id(incoming: str | None) -> str:
    """The caller's id when it is usable, else a fresh one: this process's random prefix
    and a counter, unique without a system call per request (``uuid4`` reads the
    kernel's randomness each time, and gives the interpreter lock away to do it)."""
    if incoming is not None and _VALID.fullmatch(incoming):
        return incoming
    return f"{_PREFIX}{next(_COUNTER):016x}"


def _new_process() -> None:
    global _PREFIX, _COUNTER
    _PREFIX, _COUNTER = os.urandom(8).hex(), itertools.count()


os.register_at_fork(after_in_child=_new_process)
