"""``DockerExecutor.exec``: a command in a running container, through the Engine's exec API.

``POST /containers/{id}/exec`` then ``POST /exec/{id}/start`` (attached, no
TTY, no stdin); the multiplexed stream is read frame by frame, so stdout and
stderr stay apart, with no read timeout (a command may be quiet for a long
time); ``GET /exec/{id}/json`` gives the exit code once the stream ends.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors
from docker.utils.socket import frames_iter

from gpudock.executors.base import ExecOutput, ExecutorUnavailable, LaunchError

_STREAMS = {1: "stdout", 2: "stderr"}


class DockerExecOutput(ExecOutput):
    def __init__(self, client: Any, exec_id: str, sock: Any) -> None:
        self._client = client
        self._id = exec_id
        self._sock = sock
        self._code: int | None = None

    def __iter__(self) -> Iterator[tuple[str, bytes]]:
        try:
            for stream, data in frames_iter(self._sock, tty=False):
                yield _STREAMS.get(stream, "stdout"), data
        except OSError as exc:
            raise ExecutorUnavailable(f"Docker engine lost while running a command: {exc}") from exc
        finally:
            self.close()
        try:
            self._code = self._client.api.exec_inspect(self._id).get("ExitCode")
        except (docker.errors.DockerException, OSError):
            self._code = None

    @property
    def exit_code(self) -> int | None:
        return self._code

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()

    def interrupt(self) -> None:
        """Shut the socket down: the reading thread's ``recv`` returns (``close`` alone
        does not wake it on Linux), and the iteration ends."""
        raw = getattr(self._sock, "_sock", self._sock)
        with contextlib.suppress(OSError):
            raw.shutdown(socket.SHUT_RDWR)


def start_exec(client: Any, name_or_id: str, command: list[str]) -> DockerExecOutput:
    """Create and start the exec; ``LaunchError`` for a refusal, with the engine's words."""
    try:
        created = client.api.exec_create(name_or_id, command, stdout=True, stderr=True)
        sock = client.api.exec_start(created["Id"], socket=True)
    except docker.errors.NotFound as exc:
        raise LaunchError(f"container {name_or_id} does not exist") from exc
    except docker.errors.APIError as exc:
        raise LaunchError(_explanation(exc)) from exc
    raw = getattr(sock, "_sock", sock)
    if hasattr(raw, "settimeout"):
        raw.settimeout(None)
    return DockerExecOutput(client, created["Id"], sock)


def _explanation(exc: docker.errors.APIError) -> str:
    text = exc.explanation
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return str(text or exc)
