"""How a route runs: its blocking work in one hop to a worker thread, the rest on the loop.

FastAPI runs a plain ``def`` endpoint in a worker thread, and then checks
what it returned against its response model in a second hop; each plain
``def`` dependency is one more. gpudock's dependencies do no I/O and are
``async def`` (``deps.py``), and every router is built with ``route_class=OneHop``:
a plain ``def`` endpoint is wrapped in an ``async def`` that awaits it in the
thread pool, so the endpoint's blocking work is the request's only hop, and
the check of its (already built) response model runs on the loop.

``async def`` endpoints, generators and WebSocket routes are left as they are.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from fastapi.routing import APIRoute
from starlette.concurrency import run_in_threadpool


def in_thread(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint`` as an ``async def`` that runs it in the thread pool (same signature);
    an ``async def`` or generator endpoint unchanged."""
    if (
        inspect.iscoroutinefunction(endpoint)
        or inspect.isgeneratorfunction(endpoint)
        or inspect.isasyncgenfunction(endpoint)
    ):
        return endpoint

    @functools.wraps(endpoint)  # FastAPI reads the signature through ``__wrapped__``
    async def run(*args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(endpoint, *args, **kwargs)

    return run


class OneHop(APIRoute):
    """An ``APIRoute`` whose plain ``def`` endpoint runs through ``in_thread``."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, in_thread(endpoint), **kwargs)
