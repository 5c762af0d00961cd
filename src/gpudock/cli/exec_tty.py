"""``gpudock exec -it JOB CMD…``: the client of ``WS /v1/jobs/{id}/exec/tty``.

Imported only by that command (``websockets`` with it). The local terminal
goes to raw mode for the session, so every key, Ctrl-C included, reaches the
remote TTY; SIGWINCH sends the new size; the terminal is restored however
the session ends, and the command's exit code becomes ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import termios
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from gpudock.cli.client import Client, ClientError, _raise_for_error, _why

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

NO_CODE = 255  # as ``gpudock exec``: the engine could not tell the command's exit code
STOP, RESIZE = b"x", b"w"  # wake-up bytes for the input loop
POLICY_VIOLATION = 1008  # the server's close code for a refused control or a dead token


def run(job_id: int, command: list[str]) -> int:
    """The remote command's exit code; ``ClientError`` when the server refused or is gone."""
    fd = sys.stdin.fileno()
    rows, cols = _size(fd)
    client = Client()
    query = urlencode([("command", arg) for arg in command] + [("rows", rows), ("cols", cols)])
    url = client.url.replace("http", "ws", 1) + f"/v1/jobs/{job_id}/exec/tty?{query}"
    with _connect(url, client) as ws, _raw(fd):
        end = _relay(ws, fd)
    if end.get("error"):
        sys.stderr.write(f"error: {end['error']}\n")
    code = end.get("exit")
    return NO_CODE if code is None else int(code)


def _connect(url: str, client: Client) -> ClientConnection:
    from websockets.exceptions import InvalidHandshake, InvalidStatus
    from websockets.sync.client import connect

    try:
        return connect(
            url, additional_headers=client.headers, open_timeout=client.timeout, legacy=True
        )
    except InvalidStatus as exc:
        response = exc.response
        _raise_for_error(response.status_code, response.reason_phrase, bytes(response.body or b""))
        raise ClientError(f"the server refused the upgrade ({response.status_code})") from exc
    except (OSError, InvalidHandshake) as exc:
        raise ClientError(
            f"cannot reach the gpudock server at {client.url} ({_why(exc)}); "
            "is `gpudock server` running? Set GPUDOCK_URL to point elsewhere."
        ) from exc


@contextlib.contextmanager
def _raw(fd: int) -> Iterator[None]:
    """The terminal in raw mode (no echo, no line editing, no signal keys) until exit."""
    import tty

    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _size(fd: int) -> tuple[int, int]:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return 24, 80
    return max(size.lines, 1), max(size.columns, 1)


def _relay(ws: ClientConnection, fd: int) -> dict[str, Any]:
    """Keys and resizes to the server until it ends the session; the final control frame
    (``{"exit": …}``), or ``{"exit": None, "error": …}`` when the connection was lost."""
    import select
    import signal

    from websockets.exceptions import ConnectionClosed

    wake_r, wake_w = os.pipe()
    end: dict[str, Any] = {}
    receiver = threading.Thread(target=_receive, args=(ws, end, wake_w), daemon=True)
    receiver.start()
    previous = signal.signal(signal.SIGWINCH, lambda *_: os.write(wake_w, RESIZE))
    sources = [fd, wake_r]
    try:
        while True:
            ready, _, _ = select.select(sources, [], [])
            if wake_r in ready:
                woken = os.read(wake_r, 64)
                if STOP in woken:
                    break
                if RESIZE in woken:
                    ws.send(json.dumps({"resize": list(_size(fd))}))
            if fd in ready:
                data = os.read(fd, 65536)
                if data:
                    ws.send(data)
                else:
                    sources.remove(fd)  # stdin closed: keep showing the output
    except (OSError, ConnectionClosed):  # the terminal or the connection is gone
        pass  # the receiver has (or will have) recorded why
    finally:
        signal.signal(signal.SIGWINCH, previous)
        ws.close()
        receiver.join(timeout=5)
        os.close(wake_r)
        os.close(wake_w)
    return end


def _receive(ws: ClientConnection, end: dict[str, Any], wake: int) -> None:
    """Write the TTY's output to stdout; keep the final frame in ``end``; then wake the loop."""
    from websockets.exceptions import ConnectionClosed

    out = sys.stdout.fileno()
    try:
        for frame in ws:
            if isinstance(frame, bytes):
                view = memoryview(frame)
                while view:
                    view = view[os.write(out, view) :]
            else:
                end.update(json.loads(frame))
    except ConnectionClosed as exc:
        reason = exc.rcvd.reason if exc.rcvd else ""
        if exc.rcvd is not None and exc.rcvd.code == POLICY_VIOLATION and reason:
            end.setdefault("error", f"the server ended the session: {reason}")
        end.setdefault("error", f"connection to the server lost{': ' + reason if reason else ''}")
    finally:
        if "exit" not in end:
            end.setdefault("error", "the session ended without the command's exit code")
            end["exit"] = None
        with contextlib.suppress(OSError):
            os.write(wake, STOP)
