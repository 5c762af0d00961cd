"""The Docker executor's streams: engine events, and container logs that close from any thread."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import docker
import docker.errors

from gpudock.executors.base import ContainerEvent, EventStream, ExecutorUnavailable


class DockerEvents(EventStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[ContainerEvent]:
        try:
            for event in self._stream:
                name = (event.get("Actor") or {}).get("Attributes", {}).get("name")
                if name:
                    yield ContainerEvent(str(name), str(event.get("Action") or ""))
        except (docker.errors.DockerException, OSError, ValueError, AttributeError):
            return  # connection dropped or closed

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stream.close()


class EngineStream(Iterator[bytes]):
    """A log stream from the engine; ``close`` works from any thread (docker-py's
    ``CancellableStream`` shuts its socket down). Closed once exhausted."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def __next__(self) -> bytes:
        if self._stream is None:
            raise StopIteration
        try:
            return bytes(next(self._stream))
        except StopIteration:
            self.close()
            raise
        except (docker.errors.DockerException, OSError) as exc:
            self.close()
            raise ExecutorUnavailable(f"Docker engine lost while reading logs: {exc}") from exc

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()
