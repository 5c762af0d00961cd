"""The executor contract: run, inspect, stop and read logs of job containers.

An executor decides nothing: the scheduler chose the GPUs, the controller
chose when. Every method is safe to call again after a crash: ``launch`` of a
name that already exists adopts that container instead of creating another.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from gpudock.core.job import Mount
from gpudock.core.registries import RegistryLogin


class ExecutorUnavailable(Exception):
    """The container engine cannot be reached right now (transient)."""


class EngineFault(ExecutorUnavailable):
    """The engine answered, but failed a launch for its own reasons, not the job's.

    Example: containerd still holds the task of a start that a crashed dockerd
    never finished (``task …: already exists``). Retrying the same container
    cannot help; a new attempt can. The half-made container has been removed
    when the executor could (``removed`` says whether); the launcher requeues
    the job without spending one of its retries. Classified by
    ``gpudock.executors.errors.classify``.
    """

    def __init__(self, message: str, *, removed: bool = False) -> None:
        super().__init__(message)
        self.removed = removed


class LaunchError(Exception):
    """The container cannot be started for a reason retrying will not fix.

    Examples: the image is absent and cannot be pulled; the GPU runtime refused
    the device request; the spec asks for something the engine rejects.
    """


class ContainerState(StrEnum):
    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    RESTARTING = "restarting"
    REMOVING = "removing"
    EXITED = "exited"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Everything needed to start one attempt of one job."""

    job_id: int
    attempt: int
    name: str  # deterministic: gpudock.core.job.container_name(instance, job_id, attempt)
    image: str
    command: list[str] | None
    env: dict[str, str]
    gpu_uuids: tuple[str, ...]
    gpu_memory: int | None = None  # per-GPU share in bytes, shared jobs only
    gpus_emulated: bool = False
    cpus: float | None = None
    memory: int | None = None
    shm_size: int | None = None
    mounts: tuple[Mount, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
    pull_login: RegistryLogin | None = None  # the job owner's login for the image's registry
    always_pull: bool = False  # a private registry: pull (check access) even if cached


@dataclass(frozen=True, slots=True)
class ContainerStatus:
    id: str
    name: str
    job_id: int | None  # from the gpudock.job label; None if unparsable
    attempt: int | None
    state: ContainerState
    exit_code: int | None = None
    oom_killed: bool = False
    error: str | None = None  # the engine's error string, if any
    started_at: float | None = None  # unix seconds
    finished_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.state in (ContainerState.EXITED, ContainerState.DEAD)


class Executor(ABC):
    """Minimal backend contract; capability mixins extend it later."""

    @abstractmethod
    def ping(self) -> None:
        """Return if the engine answers; raise ``ExecutorUnavailable`` if not."""

    @abstractmethod
    def launch(self, request: LaunchRequest) -> ContainerStatus:
        """Create and start the container, idempotently.

        If a container named ``request.name`` exists it is adopted: started if
        only created, returned as-is otherwise. Raises ``LaunchError`` for
        permanent failures (the half-made container is removed) and
        ``ExecutorUnavailable`` when the engine is unreachable.
        """

    @abstractmethod
    def list_containers(self) -> list[ContainerStatus]:
        """All containers that belong to this gpudock instance, in any state."""

    @abstractmethod
    def inspect(self, name_or_id: str) -> ContainerStatus | None:
        """The container's status, or None if it does not exist."""

    @abstractmethod
    def stop(self, name_or_id: str, grace_seconds: float) -> None:
        """SIGTERM, then SIGKILL after the grace period. No error if absent."""

    @abstractmethod
    def logs(self, name_or_id: str, follow: bool = False) -> Iterator[bytes]:
        """Stdout and stderr, interleaved, as chunks; follows until exit if asked.

        If the iterator has a ``close`` method, it may be called from another
        thread to end a follow early (a blocked read returns).
        """

    @abstractmethod
    def remove(self, name_or_id: str) -> None:
        """Force-remove the container. No error if absent."""

    def mount_problem(self) -> str | None:
        """Why this executor cannot bind mounts race-free (one line), or None when it can.

        While it cannot, mounts under ``rw`` allowlist entries (folders jobs can
        write) are refused at submit and at launch. An executor that does not
        override this cannot.
        """
        return "this executor does not stage bind mounts"

    def release_stale_mounts(self) -> int:
        """Remove what launches of a crashed server left for binding; how many. Idempotent."""
        return 0

    def reap_leftovers(self) -> int:
        """Remove what the engine itself left of this instance's containers after a crash
        (e.g. Docker's forgotten containerd shims); how many. Idempotent."""
        return 0


class EventStream(ABC):
    """A blocking stream of container events; ``close`` ends it from another thread."""

    @abstractmethod
    def __iter__(self) -> Iterator[str]:
        """Yields the name of each container that started, died, was OOM-killed or removed."""

    @abstractmethod
    def close(self) -> None:
        """Unblock and end the iteration. Safe to call more than once."""


class ExecutorWithEvents(Executor):
    """Capability: push notifications of container changes (faster than polling)."""

    @abstractmethod
    def events(self) -> EventStream:
        """Open a stream of this instance's container events.

        Raises ``ExecutorUnavailable`` when the engine is unreachable; the
        stream itself ends (without raising) when the connection drops.
        """


class ExecOutput(ABC):
    """The output of a command run in a container, then its exit code.

    Iterate for ``(stream, data)`` pairs as they come (``stream`` is
    ``"stdout"`` or ``"stderr"``); ``exit_code`` is known once the iteration
    ends. ``close`` stops reading (the command itself is not killed).
    """

    @abstractmethod
    def __iter__(self) -> Iterator[tuple[str, bytes]]: ...

    @property
    @abstractmethod
    def exit_code(self) -> int | None:
        """The command's exit code once its output ended; None before, or if unknown."""

    @abstractmethod
    def close(self) -> None: ...

    def interrupt(self) -> None:
        """End the iteration from another thread: a blocked read returns, the command
        itself is not killed. The default closes; an output read over a socket shuts it
        down instead (safe while another thread reads it)."""
        self.close()


class ExecSession(ABC):
    """An interactive command in a container, on a TTY (``gpudock exec -it``).

    ``read`` and ``write`` may be called from two threads at once; every other
    method from any thread. The TTY merges stdout and stderr. ``close`` never
    ends the command by itself: ``hangup`` does.
    """

    @abstractmethod
    def read(self) -> bytes:
        """The next bytes the TTY printed (blocking); ``b""`` once the command ended."""

    @abstractmethod
    def write(self, data: bytes) -> None:
        """Type ``data`` into the TTY; raises ``ExecutorUnavailable`` if the link is gone."""

    @abstractmethod
    def resize(self, rows: int, cols: int) -> None:
        """Set the TTY's size (the command gets SIGWINCH); no error if it already ended."""

    @abstractmethod
    def exit_code(self) -> int | None:
        """The command's exit code once ``read`` returned ``b""``; None if unknown."""

    @abstractmethod
    def hangup(self) -> None:
        """End the command and the processes it started (its client went away):
        SIGHUP, then SIGKILL after a short grace. No error if it already ended."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection to the engine; safe to call more than once."""


class ExecutorWithExec(Executor):
    """Capability: run a command inside a running container (``gpudock exec``)."""

    @abstractmethod
    def exec_tty(self, name_or_id: str, command: list[str], rows: int, cols: int) -> ExecSession:
        """Start ``command`` in the container on a new TTY of ``rows`` x ``cols``, stdin open.

        Raises as ``exec`` does; the caller owns the session (``close``, and
        ``hangup`` if it leaves before the command ends).
        """

    @abstractmethod
    def exec(self, name_or_id: str, command: list[str]) -> ExecOutput:
        """Start ``command`` in the container (not in a shell, no TTY, no stdin).

        Raises ``LaunchError`` when the container is absent or not running, or
        the engine refuses the command (e.g. no such executable), and
        ``ExecutorUnavailable`` when the engine is unreachable.
        """


Notify = Callable[[str], None]
