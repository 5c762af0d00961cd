"""An API worker process (``runtime/workers.py``): forked by the controller at its start,
or spawned later as ``python -m gpudock.api.worker NAME`` (a restart).

It reads its ``WorkerSpec`` from a pipe (sent when the store is ready; an
empty pipe: the controller gave up starting, exit quietly), and serves the
API on the inherited listening socket until SIGTERM. It dies with the controller
(``die_with_parent``). Wake-ups go to the controller through the inherited
socket (SQLite) or PostgreSQL notifications (``runtime/wakeup.py``).
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import socket
import sys

import uvicorn
from sqlalchemy.engine import make_url

from gpudock.api.app import create_app
from gpudock.api.serving import uvicorn_config
from gpudock.logfmt import configure as configure_logging
from gpudock.runtime.wakeup import NotifySender, Sender, SocketSender
from gpudock.runtime.workers import CONTROLLER_PID, WorkerSpec, die_with_parent, name_process
from gpudock.server import api_context

log = logging.getLogger("gpudock.server")


def sender_for(spec: WorkerSpec) -> Sender:
    """The channel this worker's wake-ups take to the controller."""
    if spec.wake_fd is not None:
        return SocketSender(spec.wake_fd)
    url = make_url(spec.db_url).set(drivername="postgresql")
    return NotifySender(url.render_as_string(hide_password=False))


def run(name: str, spec_fd: int, parent: int | None) -> int:
    """Serve as worker ``name``: wait for the spec on ``spec_fd``, then serve until SIGTERM.

    ``parent`` is the controller's pid (this process dies with it). A spec
    pipe closed empty (the controller gave up starting): exit 0 at once.
    """
    die_with_parent(parent)
    name_process(f"gpudock-{name}")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the controller's: it reloads the config
    with os.fdopen(spec_fd, "rb") as pipe:
        data = pipe.read()
    if not data:
        return 0
    spec: WorkerSpec = pickle.loads(data)
    assert spec.name == name
    json_logs = spec.log_format == "json"
    configure_logging(spec.log_level, "json" if json_logs else "text", process=spec.name)
    sender = sender_for(spec)
    ctx = api_context(spec, sender)
    listener = socket.socket(fileno=spec.listen_fd)
    config = uvicorn_config(create_app(ctx), spec.log_level, json_logs)
    log.info("%s serving the API", spec.name)
    try:
        uvicorn.Server(config).run(sockets=[listener])
    finally:
        sender.close()
        ctx.db.close()
    return 0


def main(argv: list[str]) -> int:
    """A spawned worker (a restart): ``python -m gpudock.api.worker NAME``, spec on stdin."""
    parent = os.environ.get(CONTROLLER_PID)
    return run(argv[1], sys.stdin.fileno(), int(parent) if parent else None)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
