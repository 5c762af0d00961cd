"""The executor contract: run, inspect, stop and read logs of job containers.

An executor decides nothing: the scheduler chose the GPUs, the controller
chose when. Every method is safe to call again after a crash: ``launch`` of a
name that already exists adopts that container instead of creating another.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpudock.core.cluster import AVAILABILITIES, EngineNode
from gpudock.core.job import Mount
from gpudock.core.registries import RegistryLogin


class ExecutorUnavailable(Exception):
    """The container engine cannot be reached right now (transient)."""


class NodeUnavailable(ExecutorUnavailable):
    """One node of a multi-node engine cannot run the request now (it is down).

    The engine itself answers; the node's state is the cluster watcher's to
    judge (``runtime/cluster.py``), so nothing is marked down for it here.
    """

    def __init__(self, message: str, node: str) -> None:
        super().__init__(message)
        self.node = node


class BackendRefused(Exception):
    """The engine cannot serve as this backend (one line: what is wrong, what to do).

    Raised when the server starts (``Executor.prepare``); the server refuses to start.
    """


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
class Member:
    """One container of a multi-node gang attempt: rank ``rank`` on ``node``, its GPUs."""

    rank: int
    node: str
    gpu_uuids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    """Everything needed to start one attempt of one job.

    ``node`` is where the scheduler placed it (a one-host engine has only its
    own); ``members`` holds a multi-node gang's parts in rank order (empty
    for every other job), each started as its own container on its node.
    """

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
    node: str | None = None
    members: tuple[Member, ...] = ()


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
    """Minimal backend contract; capability mixins extend it.

    ``binds_mounts``: whether it can bind host paths (``JobSpec.mounts``)
    with the allowlist's symlink checks; a job asking for mounts on an
    executor that cannot is refused at submit.
    """

    binds_mounts: bool = True

    def prepare(self) -> None:  # noqa: B027 (optional hook; the default does nothing)
        """Check, when the server starts, that the engine can serve as this backend.

        Raises ``BackendRefused`` with a one-line reason if not. The default
        accepts any engine, reachable or not (an outage is waited out later).
        """

    def engine_info(self) -> Mapping[str, Any]:
        """The engine's own description of its host (``docker info``: ``NCPU``,
        ``MemTotal``...). Raises ``ExecutorUnavailable`` when it cannot say (the default)."""
        raise ExecutorUnavailable(f"{type(self).__name__} does not describe its engine")

    def close(self) -> None:  # noqa: B027 (optional hook; the default does nothing)
        """Release the engine connections; a later call opens new ones. Default: nothing."""

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
        """Stdout and stderr, interleaved, as chunks; follows until exit if asked."""

    @abstractmethod
    def remove(self, name_or_id: str) -> None:
        """Force-remove the container. No error if absent."""


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


__all__ = ["AVAILABILITIES", "EngineNode"]


class ExecutorWithNodes(Executor):
    """Capability: the engine runs containers on many nodes (Docker Swarm).

    Its nodes become the store's nodes (``runtime/cluster.py`` keeps them in
    step); every job it runs names its node (``LaunchRequest.node``).
    """

    @abstractmethod
    def nodes(self) -> list[EngineNode]:
        """Every node of the engine, with state, availability, labels and GPUs.

        Raises ``ExecutorUnavailable`` when the engine does not answer.
        """

    @abstractmethod
    def node_events(self) -> EventStream:
        """A stream that yields a node's engine id each time its state or spec changes."""

    @abstractmethod
    def set_availability(self, engine_id: str, availability: str) -> None:
        """Set a node's availability (``AVAILABILITIES``) in the engine.

        Raises ``ExecutorUnavailable`` when it does not answer, ``LaunchError``
        when it refuses (an unknown node).
        """

    @abstractmethod
    def local_node(self) -> str:
        """The engine id of the node whose engine the server talks to."""


class ExecutorWithAgentService(Executor):
    """Capability: the engine runs the node agent itself (a Swarm global service), and says
    where each of its tasks runs, so that a task may enroll for its own node only."""

    @abstractmethod
    def deploy_agent(
        self, image: str, server_url: str, enroll_token: str, docker_socket: str
    ) -> str:
        """Create or update the agent service running ``image`` on every node; return its name.

        The tasks reach the server at ``server_url``, hold ``enroll_token``
        (an engine secret) and their node's engine socket (``docker_socket``
        on each host). Raises ``ExecutorUnavailable`` when the engine does
        not answer or refuses.
        """

    @abstractmethod
    def agent_task_node(self, task_id: str) -> str | None:
        """The engine id of the node where agent task ``task_id`` runs (or starts); None
        when it is no live task of the agent service."""


Notify = Callable[[str], None]
