"""How a route runs: its blocking work in one hop to a worker thread, the rest on the loop.

FastAPI runs a plain ``def`` endpoint in a worker thread, and then checks
what it returned against its response model in a second hop; each plain
``def`` dependency is one more. gpudock's dependencies do no I/O and are
``async def`` (``deps.py``), and every router is built with ``route_class=OneHop``:
a plain ``def`` endpoint is wrapped in an ``async def`` that awaits it in the
thread pool, so the endpoint's blocking work is the request's only hop, and
the check of its (already built) response model runs on the loop.

``async def`` endpoints, generators and WebSocket routes are left as they are.

**Quick reads on SQLite run on the loop.** An endpoint marked ``@quick_read``
does nothing but a short read of the store. On SQLite (``Edge`` sets
``LOOP_READS`` for each request of an app on SQLite) it runs on the loop, with
no hop: SQLite in WAL mode never makes a reader wait for a writer, and a read
of a few pages costs less than the hop, whose thread gives the interpreter lock
away at every SQLite call (measured: a job listing at about half the CPU). On
PostgreSQL a read waits on the network, so it keeps its hop.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool

LOOP_READS: ContextVar[bool] = ContextVar("gpudock_loop_reads", default=False)
"""True for a request whose store is SQLite: its ``@quick_read`` endpoint runs on the loop."""

_QUICK = "__gpudock_quick_read__"
Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


def quick_read(endpoint: Endpoint) -> Endpoint:
    """Mark a plain ``def`` endpoint whose blocking work is one short read of the store
    (a page of rows, never a write, an engine call or a wait): on SQLite it runs on the
    loop (module docstring)."""
    setattr(endpoint, _QUICK, True)
    return endpoint


def in_thread(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint`` as an ``async def`` that runs it in the thread pool (same signature),
    or, marked ``quick_read`` and ``LOOP_READS`` set, on the loop; an ``async def`` or
    generator endpoint unchanged."""
    if (
        inspect.iscoroutinefunction(endpoint)
        or inspect.isgeneratorfunction(endpoint)
        or inspect.isasyncgenfunction(endpoint)
    ):
        return endpoint
    quick = getattr(endpoint, _QUICK, False)

    @functools.wraps(endpoint)  # FastAPI reads the signature through ``__wrapped__``
    async def run(*args: Any, **kwargs: Any) -> Any:
        if quick and LOOP_READS.get():
            return endpoint(*args, **kwargs)
        return await run_in_threadpool(endpoint, *args, **kwargs)

    return run


class OneHop(APIRoute):
    """An ``APIRoute`` whose plain ``def`` endpoint runs through ``in_thread``."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, in_thread(endpoint), **kwargs)
