"""``DockerExecutor.exec_tty``: an interactive command on a TTY, through the Engine's exec API.

``POST /containers/{id}/exec`` (``Tty``, ``AttachStdin``) then ``POST
/exec/{id}/start`` hijacks the HTTP connection: what is written to it is
typed into the TTY, what is read from it is the TTY's output (raw, not
multiplexed); ``POST /exec/{id}/resize`` sets the size; ``GET /exec/{id}/json``
gives the exit code.

The Engine never ends an exec whose client went away: closing the connection
leaves the command (a shell, and whatever runs in it) alive, and it has no
call to signal an exec. So each session's command runs with a marker in its
environment, ``GPUDOCK_EXEC_SESSION=<random>``, which its children inherit;
``hangup`` runs a second exec, ``sh`` in the container, that sends SIGHUP to
every process whose environment holds it, then SIGKILL to those still there
after ``HANGUP_GRACE`` (``nohup`` included: what outlives a session is a job's
business, not a shell's). A process that cleared its environment, or an image
without ``sh`` and ``grep``, escapes this; the server logs the latter.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import time
from typing import Any

import docker
import docker.errors

from gpudock.executors._docker_exec import _explanation
from gpudock.executors.base import ExecSession, ExecutorUnavailable, LaunchError

log = logging.getLogger("gpudock.executors.docker")

MARKER = "GPUDOCK_EXEC_SESSION"
HANGUP_GRACE = 2.0  # seconds between SIGHUP and SIGKILL
# $0: the marker entry, $1: the signal (empty: only list). Prints each matching pid. The
# script's own processes lack the marker: it comes as an argument, not in the environment.
KILL_SCRIPT = (
    'for d in /proc/[0-9]*; do grep -q "$0" "$d/environ" 2>/dev/null && echo "${d#/proc/}"'
    ' && { [ -z "$1" ] || kill -s "$1" "${d#/proc/}" 2>/dev/null; }; done; true'
)
_ENGINE_ERRORS = (docker.errors.DockerException, OSError)


class DockerExecSession(ExecSession):
    def __init__(self, client: Any, container: str, exec_id: str, marker: str, sock: Any) -> None:
        self._client = client
        self._container = container
        self._id = exec_id
        self._marker = marker
        self._sock = sock
        self._raw: socket.socket = getattr(sock, "_sock", sock)
        self._raw.settimeout(None)
        self._closed = False

    def read(self) -> bytes:
        try:
            return self._raw.recv(65536)
        except OSError:
            return b""  # closed here (hangup/close) or by the engine: the session is over

    def write(self, data: bytes) -> None:
        try:
            self._raw.sendall(data)
        except OSError as exc:
            raise ExecutorUnavailable(f"the command's TTY is gone: {exc}") from exc

    def resize(self, rows: int, cols: int) -> None:
        with contextlib.suppress(*_ENGINE_ERRORS):
            self._client.api.exec_resize(self._id, height=rows, width=cols)

    def exit_code(self) -> int | None:
        """Polls the engine for up to a second: the stream may end just before the exit."""
        for _ in range(20):
            state = self._inspect()
            if state is None:
                return None
            if not state.get("Running"):
                code = state.get("ExitCode")
                return None if code is None else int(code)
            time.sleep(0.05)
        return None

    def hangup(self) -> None:
        """SIGHUP to every process of the session; SIGKILL to those left after the grace."""
        self._shutdown()
        left = self._signal("HUP")
        deadline = time.monotonic() + HANGUP_GRACE
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = self._signal("")
        if left:
            self._signal("KILL")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._shutdown()
        with contextlib.suppress(OSError):
            self._sock.close()
        with contextlib.suppress(OSError):
            self._raw.close()

    def _shutdown(self) -> None:
        """Unblocks a ``read`` in another thread (a plain ``close`` does not, on Linux)."""
        with contextlib.suppress(OSError):
            self._raw.shutdown(socket.SHUT_RDWR)

    def _inspect(self) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] = self._client.api.exec_inspect(self._id)
        except _ENGINE_ERRORS:
            return None
        return state

    def _running(self) -> bool:
        state = self._inspect()
        return bool(state and state.get("Running"))

    def _signal(self, signal: str) -> list[str]:
        """Send ``signal`` to the session's processes (none: just list them); their pids."""
        command = ["sh", "-c", KILL_SCRIPT, f"{MARKER}={self._marker}", signal]
        try:
            created = self._client.api.exec_create(self._container, command)
            output = self._client.api.exec_start(created["Id"])
        except _ENGINE_ERRORS as exc:
            log.warning("cannot signal exec %s in %s: %s", self._id[:12], self._container, exc)
            return []
        return bytes(output).decode(errors="replace").split()


def start_exec_tty(
    client: Any, name_or_id: str, command: list[str], rows: int, cols: int
) -> DockerExecSession:
    """Create and start the exec on a TTY; ``LaunchError`` for a refusal, in the engine's words."""
    marker = secrets.token_hex(8)
    try:
        created = client.api.exec_create(
            name_or_id,
            command,
            stdin=True,
            tty=True,
            environment={MARKER: marker},
        )
        sock = client.api.exec_start(created["Id"], tty=True, socket=True)
    except docker.errors.NotFound as exc:
        raise LaunchError(f"container {name_or_id} does not exist") from exc
    except docker.errors.APIError as exc:
        raise LaunchError(_explanation(exc)) from exc
    session = DockerExecSession(client, name_or_id, created["Id"], marker, sock)
    session.resize(rows, cols)
    return session
