"""``WS /v1/jobs/{id}/exec/tty``: an interactive command on a TTY (``gpudock exec -it``).

The upgrade request carries the bearer token (``Authorization`` header) and
the command as ``?command=sh&command=-l`` (argv, repeated; no shell), with the
TTY's first size as ``rows`` and ``cols``. Every refusal comes before the
WebSocket is accepted, as the HTTP answer to the upgrade with the usual JSON
error body: 401, 404 (no such job, or another user's), 403 (not the owner),
409 (not RUNNING), 422 (bad query), 503 (engine unreachable).

Once accepted: client -> server binary frames are typed into the TTY, text
frames are JSON controls, ``{"resize": [rows, cols]}``; server -> client
binary frames are the TTY's output, then one text frame ``{"exit": CODE}``
(null when the engine cannot say, e.g. it was lost) and a normal close.
A client that leaves first hangs the command up (``ExecSession.hangup``).
A malformed control closes with 1008 and a one-line reason; so does the
death of the caller's token (``token revoked``, ``token expired``: within a
second, ``services/token_watch.py``), and the command is hung up as when the
client leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Callable
from typing import Any

import anyio
from anyio import to_thread
from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from gpudock.core.errors import InvalidInput
from gpudock.core.job import MAX_ARGS, MAX_TEXT
from gpudock.executors.base import ExecSession, ExecutorUnavailable
from gpudock.services.auth import AuthService
from gpudock.services.job_exec import JobExec

router = APIRouter()

POLICY_VIOLATION = 1008
MAX_SIDE = 10_000  # rows or columns of a TTY


@router.websocket("/{job_id}/exec/tty")
async def exec_tty(websocket: WebSocket, job_id: str) -> None:
    """Authenticate, check and start before accepting; then relay until either side ends."""
    ctx = websocket.app.state.ctx
    number = _job_id(job_id)
    command, rows, cols = _query(websocket)
    header = websocket.headers.get("authorization")
    principal = await to_thread.run_sync(AuthService(ctx).authenticate_user, header)
    start = JobExec(ctx).start_tty
    session = await to_thread.run_sync(start, number, command, principal, rows, cols)
    watch, ended = websocket.app.state.token_watch.watch_async(principal)
    try:
        await websocket.accept()
        await _relay(websocket, session, ended, lambda: watch.reason)
    finally:
        watch.cancel()
        await to_thread.run_sync(session.close)


def _job_id(text: str) -> int:
    if not text.isdigit() or len(text) > 18:
        raise InvalidInput(f"job_id: {text!r} is not a job id", "job_id")
    return int(text)


def _query(websocket: WebSocket) -> tuple[list[str], int, int]:
    """``command`` (argv), ``rows`` and ``cols`` from the query, checked as ``exec``'s body."""
    params = websocket.query_params
    unknown = sorted(set(params) - {"command", "rows", "cols"})
    if unknown:
        raise InvalidInput(f"{unknown[0]}: unknown parameter", unknown[0])
    command = params.getlist("command")
    if not command:
        raise InvalidInput("command: required, one ?command= per argument", "command")
    if len(command) > MAX_ARGS:
        raise InvalidInput(f"command: at most {MAX_ARGS} arguments", "command")
    if any("\x00" in item or len(item) > MAX_TEXT for item in command):
        why = f"command: no NUL characters, and at most {MAX_TEXT} characters an argument"
        raise InvalidInput(why, "command")
    return command, _side(params.get("rows", "24"), "rows"), _side(params.get("cols", "80"), "cols")


def _side(text: str, name: str) -> int:
    if not text.isdigit() or len(text) > 5 or not 1 <= int(text) <= MAX_SIDE:
        raise InvalidInput(f"{name}: must be an integer from 1 to {MAX_SIDE}", name)
    return int(text)


async def _relay(
    websocket: WebSocket,
    session: ExecSession,
    token_ended: asyncio.Event,
    why: Callable[[], str | None],
) -> None:
    """Output to the client until the command ends; input to the TTY until the client
    leaves, or until ``token_ended`` (``why`` says why): then close 1008, hang up.

    Reads and writes run in worker threads of their own (not the pool that
    serves plain endpoints), so a quiet TTY holds no request thread.
    """
    reader, writer = anyio.CapacityLimiter(1), anyio.CapacityLimiter(1)
    ended = False
    reason: str | None = None

    async def output() -> None:
        nonlocal ended
        read = functools.partial(to_thread.run_sync, limiter=reader, abandon_on_cancel=True)
        try:
            while chunk := await read(session.read):
                await websocket.send_bytes(chunk)
            code = await read(session.exit_code)
            ended = True
            await websocket.send_text(json.dumps({"exit": code}))
            await websocket.close()
        except (WebSocketDisconnect, OSError, RuntimeError):
            return  # the client left: ``_input`` sees it and the command is hung up
        group.cancel_scope.cancel()

    async def watch() -> None:
        nonlocal reason
        await token_ended.wait()
        reason = why()
        group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(output)
        group.start_soon(watch)
        reason = await _input(websocket, session, writer)
        group.cancel_scope.cancel()  # the client left or misbehaved: stop both tasks
    if not ended:
        if reason and websocket.client_state is WebSocketState.CONNECTED:
            with contextlib.suppress(WebSocketDisconnect, OSError, RuntimeError):
                await websocket.close(POLICY_VIOLATION, reason)
        await to_thread.run_sync(session.hangup, limiter=writer)


async def _input(websocket: WebSocket, session: ExecSession, writer: Any) -> str | None:
    """Relay the client's frames until it leaves (None) or sends a bad control (why)."""
    while True:
        message = await websocket.receive()
        if message["type"] == "websocket.disconnect":
            return None
        if message.get("bytes") is not None:
            with contextlib.suppress(ExecutorUnavailable):  # ended: ``output`` says so
                await to_thread.run_sync(session.write, message["bytes"], limiter=writer)
            continue
        size = _resize(message.get("text") or "")
        if isinstance(size, str):
            return size
        await to_thread.run_sync(session.resize, *size, limiter=writer)


def _resize(text: str) -> tuple[int, int] | str:
    """``{"resize": [rows, cols]}`` as a pair, or the one-line reason it is refused."""
    try:
        control = json.loads(text)
        rows, cols = control["resize"]
        if set(control) != {"resize"}:
            raise ValueError
    except (ValueError, TypeError, KeyError):
        return 'a control frame must be {"resize": [rows, cols]}'
    if not all(type(n) is int and 1 <= n <= MAX_SIDE for n in (rows, cols)):
        return f"resize: rows and cols must be integers from 1 to {MAX_SIDE}"
    return rows, cols
