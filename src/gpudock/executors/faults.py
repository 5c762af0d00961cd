"""What an executor raises: the engine unreachable, slow or at fault, or the job at fault."""

from __future__ import annotations


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


class EngineTimeout(ExecutorUnavailable):
    """The engine took a call and did not answer it within its deadline.

    ``target`` is the container the call was about; None for a call about the
    whole engine (a ping, the listing). An engine can hang on one container
    (an operation stuck while it holds that container's lock) and answer
    every other call: the runtime then holds that container's job with a
    reason and goes on with the rest; the node is marked unavailable only
    when a call about the whole engine fails too.
    """

    def __init__(self, message: str, *, target: str | None = None) -> None:
        super().__init__(message)
        self.target = target


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


class LaunchError(Exception):
    """The container cannot be started for a reason retrying will not fix.

    Examples: the image is absent and cannot be pulled; the GPU runtime refused
    the device request; the spec asks for something the engine rejects.
    """
