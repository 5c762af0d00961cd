"""The controller's control socket: what an API worker on its host asks the controller.

The controller's process holds what a ``/metrics`` scrape reports besides the
store: its runtime counters and histograms (``RuntimeMetrics``: cycles,
placements, job waits) and its latest snapshot (the queue report without a
load of its own). An API worker answers ``GET /metrics`` by asking the
controller for the whole exposition (``ask``), so every worker answers what
the one-process server would. ``/healthz`` asks it for the server's role
(``ask_role``): ``leader`` (it runs the database's controller) or
``follower`` (a ``--standby`` that serves the API while it waits to lead).

The socket is a Unix stream socket in Linux's abstract namespace (no file,
no path length limit), named after the instance and the controller's pid
(``address``). One request per connection: the worker sends ``metrics\\n``
or ``role\\n`` and reads the answer until the controller closes. Only a
process of the server's own user is answered (``SO_PEERCRED``): the scrape
may be behind ``metrics.token``, which the worker checked. Each connection is
answered in a thread of its own (at most ``HANDLERS`` at once), and scrapes
one at a time: a slow scrape never delays a ``role`` answer. What a server
answers may change while it runs (``ControlServer.answer``): a follower
that takes over answers as the leader from then on, on the same socket.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
from collections.abc import Callable

log = logging.getLogger("gpudock.runtime")

REQUEST = b"metrics\n"
ROLE = b"role\n"
TIMEOUT = 10.0  # seconds a worker waits for the controller's answer
ROLE_TIMEOUT = 1.0  # seconds ``/healthz`` waits for the role
HANDLERS = 16  # connections answered at once; more wait to be accepted


def address(instance_id: str, pid: int) -> str:
    """The control socket's abstract address for a controller process."""
    return f"\0gpudock-{instance_id}-{pid}-control"


class ControlServer:
    """Answers ``metrics`` with ``scrape()`` and ``role`` with ``role`` on ``addr``, in a
    thread, until ``stop``."""

    def __init__(self, addr: str, scrape: Callable[[], bytes], role: str = "leader") -> None:
        self.scrape = scrape
        self.role = role
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.bind(addr)
        self.sock.listen(16)
        self.sock.settimeout(1.0)  # only to notice ``stop``
        self._stopped = threading.Event()
        self._handlers = threading.BoundedSemaphore(HANDLERS)
        self._scraping = threading.Lock()  # one scrape at a time, as one thread did
        self._thread = threading.Thread(target=self._run, name="gpudock-control", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            if not self._handlers.acquire(timeout=1.0):
                continue
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                self._handlers.release()
                continue
            except OSError:
                self._handlers.release()
                return
            handler = threading.Thread(
                target=self._handle, args=(conn,), name="gpudock-control-conn", daemon=True
            )
            handler.start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            with conn:
                self._answer(conn)
        except Exception:
            log.exception("control socket: a request failed")
        finally:
            self._handlers.release()

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(TIMEOUT)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        if uid != os.getuid():
            log.warning("control socket: refused a process of uid %d", uid)
            return
        request = b""
        while not request.endswith(b"\n") and len(request) < 64:
            chunk = conn.recv(64)
            if not chunk:
                return
            request += chunk
        if request == REQUEST:
            with self._scraping:
                exposition = self.scrape()
            conn.sendall(exposition)
        elif request == ROLE:
            conn.sendall(self.role.encode())

    def answer(self, scrape: Callable[[], bytes], role: str) -> None:
        """Answer with ``scrape`` and ``role`` from the next request on (a takeover)."""
        self.scrape, self.role = scrape, role

    def stop(self) -> None:
        self._stopped.set()
        with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX) as knock:
            knock.connect(self.sock.getsockname())  # its ``accept`` returns now, not in 1 s
        self._thread.join(timeout=5)
        self.sock.close()


def ask(addr: str, timeout: float = TIMEOUT, request: bytes = REQUEST) -> bytes:
    """The controller's answer to ``request`` (default: the ``/metrics`` exposition);
    ``OSError`` (or ``TimeoutError``) when it cannot answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as sock:
        sock.settimeout(timeout)
        sock.connect(addr)
        sock.sendall(request)
        parts = []
        while chunk := sock.recv(1 << 16):
            parts.append(chunk)
    if not parts:
        raise ConnectionError("the controller closed the control socket without an answer")
    return b"".join(parts)


def ask_role(addr: str) -> str:
    """``leader`` or ``follower``, as the controller's process says; ``unknown`` when it
    cannot answer within ``ROLE_TIMEOUT`` (it is starting, or restarting)."""
    try:
        return ask(addr, ROLE_TIMEOUT, ROLE).decode()
    except (OSError, UnicodeDecodeError):
        return "unknown"
