"""API workers beside one controller: the processes of ``gpudock server --api-workers N``.

::

    gpudock server            the controller: scheduler, reconciler, engine writes,
     │  (binds the port)      SIGHUP reloads, /metrics' answers (runtime/control.py)
     ├── api-1 ┐
     ├── api-2 ├─ python -m gpudock.api.worker: the API on the inherited socket
     └── api-N ┘

Contracts:

* the controller binds the API's socket; every worker inherits it and
  listens on it once the store is ready, and the kernel hands each new
  connection to one of them. A connection that arrives while a worker
  restarts waits in the socket's queue for another;
* the first workers are forked from the controller's process before it has
  a thread, a connection or the store open (``launch``): they share its
  imports and start in milliseconds. A worker started later (a restart, when
  the controller runs threads) is a fresh interpreter, never a fork of the
  threaded controller. Either reads its ``WorkerSpec`` from a pipe once the
  store is ready (``release``);
* a worker dies with the controller (``PR_SET_PDEATHSIG``): a killed server
  never leaves one holding the port. ``ps`` shows it as ``gpudock-api-N``;
* a worker that exits is started again at once, and after 1 s doubling to
  30 s while it keeps dying within a minute of its start; each exit is
  logged with its status;
* ``stop`` sends each worker SIGTERM (uvicorn finishes its requests), then
  SIGKILL after ``STOP_GRACE`` seconds.

What a worker and the controller share goes through the store (the cluster
version, the published reservations and usage history), the wake-up channel
(``wakeup.py``) and the control socket (``control.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from gpudock.config import ServerConfig

log = logging.getLogger("gpudock.server")

STOP_GRACE = 10.0  # seconds a worker has to finish its requests on stop
RESTART_PAUSE = (1.0, 30.0)  # first and largest pause before restarting a failing worker
STEADY = 60.0  # a worker that ran this long before it exited restarts at once
CONTROLLER_PID = "GPUDOCK_CONTROLLER_PID"  # env: the process the worker must die with


@dataclass(frozen=True)
class WorkerSpec:
    """What an API worker is told on stdin (pickled: the same code runs both ends)."""

    name: str  # api-1, api-2, ...
    home: Path
    db_url: str
    base_config: ServerConfig  # the config file's (an applied config goes on top)
    node_name: str
    instance_id: str
    log_dir: Path
    gpus_emulated: bool
    log_level: str
    log_format: str
    listen_fd: int  # the inherited listening socket
    wake_fd: int | None  # the inherited wake-up socket (SQLite); None: PostgreSQL NOTIFY
    control_address: str  # the controller's control socket (``control.py``)


class Child:
    """A worker process: its pid and the pipe its spec goes down (forked or spawned)."""

    def __init__(self, pid: int, spec_fd: int, popen: object = None) -> None:
        self.pid, self.spec_fd = pid, spec_fd
        self.returncode: int | None = None
        self._popen = popen  # kept: a dropped Popen may reap the process before ``wait``

    def send_spec(self, spec: WorkerSpec) -> None:
        """Write the pickled spec and close the pipe (its end is the worker's EOF)."""
        with contextlib.suppress(OSError), os.fdopen(self.spec_fd, "wb") as pipe:
            pipe.write(pickle.dumps(spec))  # OSError: it died already (``wait`` tells)

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit code (negative: the signal); None if it still runs after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            flags = 0 if deadline is None else os.WNOHANG
            try:
                pid, status = os.waitpid(self.pid, flags)
            except ChildProcessError:
                self.returncode = 0  # reaped elsewhere
                break
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
            elif deadline is not None and time.monotonic() >= deadline:
                return None
            else:
                time.sleep(0.05)
        return self.returncode

    def signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


class Slot:
    """One worker's place: its name, its process (while one runs) and its restarts."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.child: Child | None = None
        self.started = 0.0
        self.failures = 0


class Supervisor:
    """Starts, watches, restarts and stops the API workers."""

    def __init__(self, count: int, inherited: tuple[int, ...]) -> None:
        self.slots = [Slot(f"api-{n}") for n in range(1, count + 1)]
        self.inherited = inherited  # the fds every worker inherits (listening, wake-up)
        self.spec: WorkerSpec | None = None
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []

    def launch(self) -> None:
        """Start every worker; each waits for its spec (``release``). Forked while this
        process has one thread; spawned otherwise."""
        fork = hasattr(os, "fork") and threading.active_count() == 1
        for slot in self.slots:
            self._fork(slot) if fork else self._spawn(slot)

    def release(self, spec: WorkerSpec) -> None:
        """Hand each worker its spec (the store is ready) and watch them from now on."""
        self.spec = spec
        for slot in self.slots:
            self._send_spec(slot)
            thread = threading.Thread(
                target=self._watch, args=(slot,), name=f"gpudock-{slot.name}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def pids(self) -> dict[str, int]:
        """The running workers' pids, by name."""
        return {s.name: s.child.pid for s in self.slots if s.child and s.child.returncode is None}

    def closing(self) -> None:
        """The server is stopping: a worker that exits from now on is not started again
        (safe in a signal handler: Ctrl-C reaches the workers as well)."""
        self._stopping.set()

    def stop(self) -> None:
        """SIGTERM every worker, SIGKILL those still running after ``STOP_GRACE``."""
        self._stopping.set()
        children = [s.child for s in self.slots if s.child is not None]
        for child in children:
            child.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for child in children:
            if child.wait(timeout=max(0.0, deadline - time.monotonic())) is None:
                child.signal(signal.SIGKILL)
                child.wait()
        for thread in self._threads:
            thread.join(timeout=5)

    def _fork(self, slot: Slot) -> None:
        read_fd, write_fd = os.pipe()
        others = [s.child.spec_fd for s in self.slots if s.child is not None]
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            code = 1
            try:
                os.close(write_fd)
                for fd in others:  # other workers' pipes: their EOF must not wait for us
                    with contextlib.suppress(OSError):
                        os.close(fd)
                from gpudock.api import worker

                code = worker.run(slot.name, read_fd, parent)
            finally:
                os._exit(code)
        os.close(read_fd)
        slot.child, slot.started = Child(pid, write_fd), time.monotonic()

    def _spawn(self, slot: Slot) -> None:
        env = {**os.environ, CONTROLLER_PID: str(os.getpid())}
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpudock.api.worker", slot.name],
            stdin=subprocess.PIPE,
            pass_fds=self.inherited,
            env=env,
        )
        assert proc.stdin is not None
        slot.child = Child(proc.pid, os.dup(proc.stdin.fileno()), proc)
        proc.stdin.close()
        slot.started = time.monotonic()

    def _send_spec(self, slot: Slot) -> None:
        assert slot.child is not None and self.spec is not None
        slot.child.send_spec(replace(self.spec, name=slot.name))

    def _watch(self, slot: Slot) -> None:
        """Wait for the worker to exit; start it again unless the server is stopping.

        Runs for the server's lifetime: a spawned worker dies with the thread
        that started it (``PR_SET_PDEATHSIG`` follows the thread), so this
        thread starts the restarts and outlives them.
        """
        while True:
            assert slot.child is not None
            code = slot.child.wait()
            assert code is not None
            if self._stopping.is_set():
                return
            ran = time.monotonic() - slot.started
            slot.failures = 0 if ran >= STEADY else slot.failures + 1
            pause = 0.0
            if slot.failures > 1:
                pause = min(RESTART_PAUSE[1], RESTART_PAUSE[0] * 2 ** (slot.failures - 2))
            how = f"signal {-code}" if code < 0 else f"status {code}"
            log.error(
                "API worker %s (pid %d) exited with %s after %.0f s; starting it again%s",
                slot.name,
                slot.child.pid,
                how,
                ran,
                f" in {pause:.0f} s" if pause else "",
            )
            if self._stopping.wait(pause):
                return
            self._spawn(slot)
            self._send_spec(slot)


def name_process(name: str) -> None:
    """Set this process's name as ``ps`` and ``/proc/PID/comm`` show it (15 bytes at
    most): a forked worker's command line is the controller's."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def die_with_parent(parent: int | None) -> None:
    """Have the kernel SIGKILL this process when its parent (the controller) dies; exit
    now if it already has (``parent`` is not the parent any more)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    if parent is not None and os.getppid() != parent:
        os._exit(0)
