"""The executor contract: run, inspect, stop and read logs of job containers.

An executor decides nothing: the scheduler chose the GPUs, the controller
chose when. Every method is safe to call again after a crash: ``launch`` of a
name that already exists adopts that container instead of creating another.

Every call has a deadline, here in the base class, so that every backend has
the same: the public methods are the contract the runtime calls, and each
runs the backend's own engine work (the ``_``-prefixed method a backend
implements) through ``deadlines.EngineCalls`` with its ``Deadlines``. A call
past its deadline raises ``EngineTimeout``, naming the container it was about;
a listing never fails because the engine does not describe one container
(that one is listed ``UNKNOWN``).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudock.core.cluster import AVAILABILITIES, EngineNode
from gpudock.core.cuda_require import ImageRequirements
from gpudock.core.job import Mount
from gpudock.core.registries import RegistryLogin
from gpudock.executors.deadlines import Deadlines, EngineCalls
from gpudock.executors.faults import BackendRefused as BackendRefused
from gpudock.executors.faults import EngineFault as EngineFault
from gpudock.executors.faults import EngineTimeout as EngineTimeout
from gpudock.executors.faults import ExecutorUnavailable as ExecutorUnavailable
from gpudock.executors.faults import LaunchError as LaunchError
from gpudock.executors.faults import NodeUnavailable as NodeUnavailable
from gpudock.gpus.mps import MpsSetup

if TYPE_CHECKING:
    from gpudock.config import ServerConfig


class ContainerState(StrEnum):
    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    RESTARTING = "restarting"
    REMOVING = "removing"
    EXITED = "exited"
    DEAD = "dead"
    UNKNOWN = "unknown"  # listed by the engine, but not described within its deadline


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
    gpu_memory_total: int | None = None  # the smallest allocated GPU's memory, bytes
    gpu_compute: int | None = None  # percent of each GPU's compute (MPS), shared jobs only
    mps: MpsSetup | None = None  # the node's MPS daemon, for a shared job on an MPS node
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
    fresh: bool = False  # first use of ``name`` (just committed STARTING): nothing to adopt


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


@dataclass(frozen=True, slots=True)
class ListedContainer:
    """One container as the engine's listing names it, before it is described."""

    id: str
    name: str
    job_id: int | None  # from the gpudock.job label; None if unparsable
    attempt: int | None


class Executor(ABC):
    """The backend contract, with a deadline on every call (module docstring).

    A backend implements the ``_``-prefixed methods and calls
    ``super().__init__(deadlines)``. Each public method raises
    ``EngineTimeout`` once its deadline passes; while a late call about one
    container still runs, further calls about it raise at once
    (``deadlines.EngineCalls``).
    """

    binds_mounts: bool = True
    """Whether it can bind host paths (``JobSpec.mounts``) with the allowlist's symlink
    checks; a job asking for mounts on an executor that cannot is refused at submit."""

    def __init__(self, deadlines: Deadlines | None = None) -> None:
        self.deadlines = deadlines or Deadlines()
        self._calls = EngineCalls()

    @classmethod
    def create(cls, config: ServerConfig, instance_id: str, home: Path) -> Executor:
        """This backend's executor for a server (``executors/registry.py``): built from the
        whole ``config``, labelling with ``instance_id``, keeping state under ``home``.
        Touches no engine."""
        raise TypeError(f"{cls.__name__} is no backend of the registry (it has no create)")

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

    def ping(self) -> None:
        """Return if the engine answers; raise ``ExecutorUnavailable`` if not."""
        self._calls.run("ping", "a ping", self.deadlines.describe, self._ping)

    def launch(self, request: LaunchRequest) -> ContainerStatus:
        """Create and start the container, idempotently.

        If a container named ``request.name`` exists it is adopted: started if
        only created, returned as-is otherwise (``request.fresh``: the name was
        never used, so the launch creates first and adopts only if the name
        turns out taken). Raises ``LaunchError`` for
        permanent failures (the half-made container is removed),
        ``EngineTimeout`` past ``deadlines.launch``, and
        ``ExecutorUnavailable`` when the engine is unreachable.
        """
        name = request.name
        return self._calls.run(
            name,
            f"starting container {name}",
            self.deadlines.launch,
            lambda: self._launch(request),
            target=name,
        )

    def list_containers(self) -> list[ContainerStatus]:
        """All containers that belong to this gpudock instance, in any state.

        Each listed container is described (``inspect``) on its own deadline;
        one the engine does not describe in time is returned ``UNKNOWN``, its
        ``error`` saying why, and the others are described all the same. One
        removed between the listing and its description is left out.
        """
        listed = self._calls.run("list", "the listing", self.deadlines.call, self._list)
        out = []
        for entry in listed:
            try:
                status = self.inspect(entry.name)
            except EngineTimeout as exc:
                status = ContainerStatus(
                    id=entry.id,
                    name=entry.name,
                    job_id=entry.job_id,
                    attempt=entry.attempt,
                    state=ContainerState.UNKNOWN,
                    error=str(exc),
                )
            if status is not None:
                out.append(status)
        return out

    def inspect(self, name_or_id: str) -> ContainerStatus | None:
        """The container's status, or None if it does not exist."""
        return self._calls.run(
            name_or_id,
            f"describing container {name_or_id}",
            self.deadlines.describe,
            lambda: self._inspect(name_or_id),
            target=name_or_id,
        )

    def stop(self, name_or_id: str, grace_seconds: float) -> None:
        """SIGTERM, then SIGKILL after the grace period. No error if absent."""
        self._calls.run(
            name_or_id,
            f"stopping container {name_or_id}",
            grace_seconds + self.deadlines.call,
            lambda: self._stop(name_or_id, grace_seconds),
            target=name_or_id,
        )

    def remove(self, name_or_id: str) -> None:
        """Force-remove the container. No error if absent."""
        self._calls.run(
            name_or_id,
            f"removing container {name_or_id}",
            self.deadlines.call,
            lambda: self._remove(name_or_id),
            target=name_or_id,
        )

    def logs(self, name_or_id: str, follow: bool = False) -> Iterator[bytes]:
        """Stdout and stderr, interleaved, as chunks; follows until exit if asked.

        Without ``follow`` each chunk comes within ``deadlines.call`` or the
        iteration raises ``EngineTimeout``. A followed log waits for the
        container's output for as long as it takes; if the iterator has a
        ``close`` method, it may be called from another thread to end it early
        (a blocked read returns).
        """
        chunks = self._logs(name_or_id, follow)
        return chunks if follow else self._bounded(chunks, name_or_id)

    def _bounded(self, chunks: Iterator[bytes], name: str) -> Iterator[bytes]:
        """``chunks``, each within ``deadlines.call``."""
        late = False
        try:
            while True:
                try:
                    chunk = self._calls.run(
                        f"logs {name}",
                        f"reading the log of container {name}",
                        self.deadlines.call,
                        lambda: next(chunks, None),
                        target=name,
                    )
                except EngineTimeout:
                    late = True  # still running in its worker: not ours to close
                    raise
                if chunk is None:
                    return
                yield chunk
        finally:
            close = getattr(chunks, "close", None)
            if close is not None and not late:
                with contextlib.suppress(ValueError):  # a generator still running elsewhere
                    close()

    def mount_problem(self) -> str | None:
        """Why this executor cannot bind mounts race-free (one line), or None when it can.

        While it cannot, mounts under ``rw`` allowlist entries (folders jobs can
        write) are refused at submit and at launch. An executor that does not
        override this cannot.
        """
        return "this executor does not stage bind mounts"

    def image_requirements(self, image: str) -> tuple[bool, ImageRequirements | None]:
        """Whether the engine has ``image``, and its ``NVIDIA_REQUIRE_*`` (None: none).
        An executor that does not override this knows no image: ``(False, None)``."""
        return False, None

    def release_stale_mounts(self) -> int:
        """Remove what launches of a crashed server left for binding; how many. Idempotent."""
        return 0

    def reap_leftovers(self) -> int:
        """Remove what the engine itself left of this instance's containers after a crash
        (e.g. Docker's forgotten containerd shims); how many. Idempotent."""
        return 0

    @abstractmethod
    def _ping(self) -> None:
        """``ping``'s engine work."""

    @abstractmethod
    def _launch(self, request: LaunchRequest) -> ContainerStatus:
        """``launch``'s engine work."""

    @abstractmethod
    def _list(self) -> list[ListedContainer]:
        """The containers of this gpudock instance, in any state, undescribed."""

    @abstractmethod
    def _inspect(self, name_or_id: str) -> ContainerStatus | None:
        """``inspect``'s engine work."""

    @abstractmethod
    def _stop(self, name_or_id: str, grace_seconds: float) -> None:
        """``stop``'s engine work."""

    @abstractmethod
    def _logs(self, name_or_id: str, follow: bool) -> Iterator[bytes]:
        """``logs``' engine work: the chunks, however slow."""

    @abstractmethod
    def _remove(self, name_or_id: str) -> None:
        """``remove``'s engine work."""


@dataclass(frozen=True, slots=True)
class ContainerEvent:
    """What happened to a container of this instance: its ``name``, and the
    ``action`` (``start``, ``die``, ``oom`` or ``destroy``: it was removed)."""

    name: str
    action: str


class EventStream(ABC):
    """A blocking stream of container events; ``close`` ends it from another thread."""

    @abstractmethod
    def __iter__(self) -> Iterator[ContainerEvent]:
        """Yields each container that started, died, was OOM-killed or removed."""

    @abstractmethod
    def close(self) -> None:
        """Unblock and end the iteration. Safe to call more than once."""


class ExecutorWithEvents(Executor):
    """Capability: push notifications of container changes (faster than polling)."""

    def events(self) -> EventStream:
        """Open a stream of this instance's container events.

        Raises ``ExecutorUnavailable`` when the engine is unreachable
        (``EngineTimeout`` when the opening takes past ``deadlines.call``); the
        stream itself ends (without raising) when the connection drops.
        """
        return self._calls.run("events", "opening the event stream", self.deadlines.call,
                               self._events)  # fmt: skip

    @abstractmethod
    def _events(self) -> EventStream:
        """``events``' engine work."""


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

    def exec_tty(self, name_or_id: str, command: list[str], rows: int, cols: int) -> ExecSession:
        """Start ``command`` in the container on a new TTY of ``rows`` x ``cols``, stdin open.

        Raises as ``exec`` does; the caller owns the session (``close``, and
        ``hangup`` if it leaves before the command ends).
        """
        return self._calls.run(
            f"exec {name_or_id}",
            f"starting a command in container {name_or_id}",
            self.deadlines.call,
            lambda: self._exec_tty(name_or_id, command, rows, cols),
            target=name_or_id,
        )

    def exec(self, name_or_id: str, command: list[str]) -> ExecOutput:
        """Start ``command`` in the container (not in a shell, no TTY, no stdin).

        Raises ``LaunchError`` when the container is absent or not running, or
        the engine refuses the command (e.g. no such executable), and
        ``ExecutorUnavailable`` when the engine is unreachable (``EngineTimeout``
        when the start takes past ``deadlines.call``; the output that follows
        comes as slowly as the command prints it).
        """
        return self._calls.run(
            f"exec {name_or_id}",
            f"starting a command in container {name_or_id}",
            self.deadlines.call,
            lambda: self._exec(name_or_id, command),
            target=name_or_id,
        )

    @abstractmethod
    def _exec_tty(self, name_or_id: str, command: list[str], rows: int, cols: int) -> ExecSession:
        """``exec_tty``'s engine work."""

    @abstractmethod
    def _exec(self, name_or_id: str, command: list[str]) -> ExecOutput:
        """``exec``'s engine work."""


__all__ = ["AVAILABILITIES", "EngineNode"]


class NodeEventStream(ABC):
    """A blocking stream of node changes; ``close`` ends it from another thread."""

    @abstractmethod
    def __iter__(self) -> Iterator[str]:
        """Yields the engine id of each node whose state or spec changed."""

    @abstractmethod
    def close(self) -> None:
        """Unblock and end the iteration. Safe to call more than once."""


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
    def node_events(self) -> NodeEventStream:
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

    @abstractmethod
    def detection_delay(self) -> float:
        """Seconds the engine may take to mark a node that went silent as down."""


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
