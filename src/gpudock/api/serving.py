"""How gpudock runs uvicorn: one place, for the server and for the benchmark that compares it.

uvicorn with ``uvloop`` (its event loop) and ``httptools`` (its HTTP/1.1
parser), the two the ecosystem uses for speed (``uvicorn[standard]``); both
are pinned dependencies, so a server never silently falls back to the
slower pure-Python pair. No access log (each request is logged at DEBUG by
``edge.py``). A stop cuts streams still open after ``STOP_GRACE_SECONDS``.
Under ``--log-format json`` uvicorn's own records go through gpudock's JSON
handler (``log_config=None``).
"""

from __future__ import annotations

from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

LOOP = "uvloop"
HTTP = "httptools"
STOP_GRACE_SECONDS = 3
"""How long a stopping worker waits for open streaming requests (log follows, exec
sessions, dashboard sessions) before cutting them."""


def uvicorn_config(app: Any, log_level: str, json_logs: bool, **kwargs: Any) -> uvicorn.Config:
    """The ``uvicorn.Config`` gpudock serves ``app`` with; ``kwargs`` (host, port, ...) as
    uvicorn takes them."""
    return uvicorn.Config(
        app,
        loop=LOOP,
        http=HTTP,
        log_level=log_level.lower(),
        access_log=False,
        log_config=None if json_logs else LOGGING_CONFIG,
        timeout_graceful_shutdown=STOP_GRACE_SECONDS,
        **kwargs,
    )
