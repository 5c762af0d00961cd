"""A Unix-socket relay in front of the Docker socket that a test can cut.

``down()`` closes the listening socket and every relayed connection, so the
client sees exactly what it sees when dockerd is stopped (connection refused
/ reset); ``up()`` listens again. The daemon itself, shared by other tests,
is never touched.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path


class SocketRelay:
    def __init__(self, listen_path: Path, upstream_path: str = "/var/run/docker.sock") -> None:
        self.listen_path = listen_path
        self.upstream_path = upstream_path
        self._server: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"unix://{self.listen_path}"

    def up(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.listen_path)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.listen_path))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def down(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.listen_path)
        with self._lock:
            conns, self._conns = self._conns, set()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.upstream_path)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)
