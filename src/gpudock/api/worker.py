"""An API worker process: ``python -m gpudock.api.worker NAME`` (``runtime/workers.py``).

Started by the controller, it imports the server's modules at once, then
reads its ``WorkerSpec`` from stdin (sent when the store is ready; EOF: the
controller gave up starting, exit quietly), and serves the API on the
inherited listening socket until SIGTERM. It dies with the controller
(``die_with_parent``). Wake-ups go to the controller through the inherited
socket (SQLite) or PostgreSQL notifications (``runtime/wakeup.py``).
"""

from __future__ import annotations

import logging
import pickle
import socket
import sys

import uvicorn
from sqlalchemy.engine import make_url

from gpudock.api.app import create_app
from gpudock.api.serving import uvicorn_config
from gpudock.logfmt import configure as configure_logging
from gpudock.runtime.wakeup import NotifySender, Sender, SocketSender
from gpudock.runtime.workers import WorkerSpec, die_with_parent
from gpudock.server import api_context

log = logging.getLogger("gpudock.server")


def sender_for(spec: WorkerSpec) -> Sender:
    """The channel this worker's wake-ups take to the controller."""
    if spec.wake_fd is not None:
        return SocketSender(spec.wake_fd)
    url = make_url(spec.db_url).set(drivername="postgresql")
    return NotifySender(url.render_as_string(hide_password=False))


def main(argv: list[str]) -> int:
    die_with_parent()
    data = sys.stdin.buffer.read()
    if not data:
        return 0  # the controller did not get the store ready: nothing to serve
    spec: WorkerSpec = pickle.loads(data)
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


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
