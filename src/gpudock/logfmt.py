"""Server logs: human-readable text (the default) or one JSON object per line.

``configure(level, "json")`` puts ``JsonFormatter`` on the root logger. Each
line holds ``time`` (ISO 8601 with its UTC offset), ``level``, ``logger`` and
``message`` and, where they apply, ``job``, ``node`` and ``request_id``
(plus ``exception`` with the traceback of ``log.exception``). ``job`` and
``node`` come from the record (``log.info(..., extra={"job": 7})``) or from
the context (``bind_job``: the runtime's lanes bind the job they work on);
``request_id`` from the request-id middleware (``api/request_id.py``), and
``process`` (``api-2``, ``controller``) in a server of several processes.
Text lines carry the process as ``[api-2]`` after the level.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"

PROCESS: dict[str, str | None] = {"name": None}  # this process's name in a server of several
request_id: ContextVar[str | None] = ContextVar("gpudock_request_id", default=None)
job_id: ContextVar[int | None] = ContextVar("gpudock_job_id", default=None)


@contextmanager
def bind_job(job: int) -> Iterator[None]:
    """Records logged inside carry ``job`` (unless they name another)."""
    token = job_id.set(job)
    try:
        yield
    finally:
        job_id.reset(token)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line; never raises on odd arguments."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        job = getattr(record, "job", None)
        job = job if job is not None else job_id.get()
        if job is not None:
            entry["job"] = job
        node = getattr(record, "node", None)
        if node is not None:
            entry["node"] = node
        rid = getattr(record, "request_id", None) or request_id.get()
        if rid is not None:
            entry["request_id"] = rid
        if PROCESS["name"] is not None:
            entry["process"] = PROCESS["name"]
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure(level: str, fmt: LogFormat, process: str | None = None) -> None:
    """Log at ``level`` to stderr, as text or JSON lines; replaces any root handlers.

    ``process`` names this process in each line (a server of several processes).
    In JSON mode Python warnings are logged too, so stderr stays JSON lines.
    """
    PROCESS["name"] = process
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
        logging.captureWarnings(True)
    else:
        text = TEXT_FORMAT.replace(" %(name)s", f" [{process}] %(name)s") if process else None
        handler.setFormatter(logging.Formatter(text or TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
