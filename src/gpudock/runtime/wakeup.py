"""Wake-ups: a submit (or cancel, or apply) in any process wakes the controller's loops at once.

``Wakeup`` is what the controller's loops wait on (``wait``/``clear``) and
what services ``set``. In the controller's process it is a plain event; in
an API worker it also passes the wake-up on to the controller, through one
of two channels:

* ``SocketSender`` (one host, any database): a Unix datagram socket pair the
  controller makes (``socket_channel``); every worker inherits the sending
  end. A wake-up is one byte (``s``: scheduler, ``r``: reconciler), sent
  without blocking. A full buffer already holds a wake-up the controller has
  not read yet, so dropping that one loses nothing.
* ``NotifySender`` (PostgreSQL, from any host): ``NOTIFY gpudock_wake`` with
  the byte as payload, on a connection of the sender's own, from one thread
  that sends a burst of wake-ups as one notification each per kind.

The controller's listener (``SocketListener``, ``NotifyListener``) sets its
local ``Wakeup`` for each message. A ``NotifyListener`` that (re)connects sets
both, since it may have missed one while it was away. Neither channel polls:
a wake-up reaches the controller in a fraction of a millisecond locally.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Protocol

log = logging.getLogger("gpudock.runtime")

KINDS = {"scheduler": b"s", "reconciler": b"r"}
CHANNEL = "gpudock_wake"  # the PostgreSQL notification channel


class Wakeup:
    """An event the controller's loops wait on; ``set`` also calls ``forward`` (if any),
    which passes it on to the controller's process."""

    def __init__(self, forward: Callable[[], None] | None = None) -> None:
        self._event = threading.Event()
        self._forward = forward

    def set(self) -> None:
        self._event.set()
        if self._forward is not None:
            self._forward()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()


class Sender(Protocol):
    def send(self, kind: str) -> None: ...

    def close(self) -> None: ...


class SocketSender:
    """Sends wake-ups on the datagram socket ``fd`` (inherited from the controller)."""

    def __init__(self, fd: int) -> None:
        self.sock = socket.socket(fileno=fd)

    def send(self, kind: str) -> None:
        # BlockingIOError: a wake-up is already waiting unread. ConnectionRefusedError:
        # the controller is gone (this worker dies with it).
        with contextlib.suppress(OSError):
            self.sock.send(KINDS[kind], socket.MSG_DONTWAIT)

    def close(self) -> None:
        self.sock.close()


class NotifySender:
    """Sends wake-ups as PostgreSQL notifications from a thread of its own.

    ``send`` only marks the kind and returns; the thread sends each marked
    kind once, so a burst of submits costs one notification per round trip.
    A failed send is logged and its connection opened again for the next;
    while the database is down no submit commits, so no wake-up is owed.
    """

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._pending: set[str] = set()
        self._ready = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="gpudock-notify", daemon=True)
        self._thread.start()

    def send(self, kind: str) -> None:
        with self._ready:
            self._pending.add(kind)
            self._ready.notify()

    def close(self) -> None:
        with self._ready:
            self._stopped = True
            self._ready.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        import psycopg

        conn: psycopg.Connection[object] | None = None
        while True:
            with self._ready:
                while not self._pending and not self._stopped:
                    self._ready.wait()
                if self._stopped:
                    break
                kinds, self._pending = self._pending, set()
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5)
                for kind in sorted(kinds):
                    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, KINDS[kind].decode()))
            except psycopg.Error as exc:
                log.warning("cannot wake the controller through PostgreSQL: %s", exc)
                conn = None
        if conn is not None:
            conn.close()


def forwarding(sender: Sender) -> dict[str, Wakeup]:
    """An API worker's wake-ups by kind: each ``set`` is sent to the controller."""
    return {kind: Wakeup(lambda kind=kind: sender.send(kind)) for kind in KINDS}  # type: ignore[misc]


class Listener(Protocol):
    def stop(self) -> None: ...


def socket_channel() -> tuple[socket.socket, socket.socket]:
    """A new datagram socket pair: (the controller's receiving end, the workers' sending end)."""
    receive, send = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    send.set_inheritable(True)
    return receive, send


class SocketListener:
    """Sets ``wakes[kind]`` for each byte that arrives on ``sock``, in a thread, until ``stop``.

    ``peer`` (the pair's sending end, when this process holds it): ``stop`` sends
    on it so that the thread ends at once rather than at its next timeout.
    """

    def __init__(
        self, sock: socket.socket, wakes: Mapping[str, Wakeup], peer: socket.socket | None = None
    ) -> None:
        self.sock, self.wakes, self.peer = sock, wakes, peer
        self._by_byte = {code[0]: kind for kind, code in KINDS.items()}
        self._stopped = threading.Event()
        self.sock.settimeout(1.0)  # only to notice ``stop``; a wake-up arrives at once
        self._thread = threading.Thread(target=self._run, name="gpudock-wakeups", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                data = self.sock.recv(256)
            except TimeoutError:
                continue
            except OSError:
                return
            for code in set(data):
                kind = self._by_byte.get(code)
                if kind is not None:
                    self.wakes[kind].set()

    def stop(self) -> None:
        self._stopped.set()
        if self.peer is not None:
            with contextlib.suppress(OSError):
                self.peer.send(b"\0", socket.MSG_DONTWAIT)  # no kind: it only ends the wait
        self._thread.join(timeout=5)
        self.sock.close()


class NotifyListener:
    """``LISTEN gpudock_wake`` on a connection of its own, setting ``wakes`` per message.

    Reconnects after a failure (1 s, doubling to 30 s); each (re)connection
    sets every wake-up, since a message may have been missed meanwhile.
    """

    def __init__(self, conninfo: str, wakes: Mapping[str, Wakeup]) -> None:
        self.conninfo, self.wakes = conninfo, wakes
        self._by_payload = {code.decode(): kind for kind, code in KINDS.items()}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpudock-listen", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import psycopg

        pause = 1.0
        while not self._stopped.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    pause = 1.0
                    for wake in self.wakes.values():
                        wake.set()
                    while not self._stopped.is_set():
                        for note in conn.notifies(timeout=1.0):
                            kind = self._by_payload.get(note.payload)
                            if kind is not None:
                                self.wakes[kind].set()
            except psycopg.Error as exc:
                log.warning("wake-ups from PostgreSQL interrupted (%s); retrying", exc)
                self._stopped.wait(pause)
                pause = min(30.0, pause * 2)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(timeout=5)
