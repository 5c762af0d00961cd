"""``gpudock server``: start the single-host server: the controller and its API workers.

The server side (uvicorn, SQLAlchemy, the app) is imported inside the command,
so that loading the CLI for a client command stays light.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from gpudock.cli.common import fail, lazy_console
from gpudock.home import default_home
from gpudock.logfmt import LOG_FORMATS, JsonFormatter
from gpudock.logfmt import configure as configure_logging

if TYPE_CHECKING:
    from gpudock.runtime.workers import Supervisor
    from gpudock.server import Following

err = lazy_console(stderr=True)
log = logging.getLogger("gpudock.server")


def _fail(message: str) -> NoReturn:
    if any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers):
        log.critical("%s", message)  # --log-format json: stderr stays JSON lines
        raise typer.Exit(2)
    fail(message, 2)


MAX_API_WORKERS = 64


def default_api_workers() -> int:
    """The machine's cores this process may use, at most 4."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, cores or 1))


def parse_api_workers(value: str | None) -> int:
    """``--api-workers``: a whole number from 1; None: ``default_api_workers``."""
    if value is None:
        return default_api_workers()
    text = value.strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_API_WORKERS:
        _fail(
            f"--api-workers must be a whole number from 1 to {MAX_API_WORKERS} "
            f"(API processes); got {value!r}"
        )
    return int(text)


def server(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port to listen on", min=1, max=65535)] = 8470,
    db: Annotated[
        str | None, typer.Option(help="database URL; default SQLite under $GPUDOCK_HOME")
    ] = None,
    emulate_gpus: Annotated[
        str | None,
        typer.Option(help="declare emulated GPUs, e.g. 4xH100-80GB or 2xA100-40GB,2xT4-16GB"),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="server config YAML")] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            help="docker (this host's engine; the default) or swarm (the Swarm this host "
            "manages); overrides the config's backend"
        ),
    ] = None,
    home: Annotated[Path | None, typer.Option(help="state dir; default $GPUDOCK_HOME")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
    log_format: Annotated[
        str,
        typer.Option(
            help="text (human-readable) or json (one object per line)",
            envvar="GPUDOCK_LOG_FORMAT",
        ),
    ] = "text",
    api_workers: Annotated[
        str | None,
        typer.Option(
            help="processes serving the API beside the controller; default: the cores, at most 4",
            show_default=False,
        ),
    ] = None,
    standby: Annotated[
        bool,
        typer.Option(
            "--standby",
            help="if another server runs this database's controller, wait and take over "
            "when it stops (default: refuse to start)",
        ),
    ] = False,
) -> None:
    """Start the gpudock server on this host, or for the Swarm it manages: the controller
    (scheduler, reconciler) and ``--api-workers`` processes serving the API. One server
    runs a database's controller (``runtime/lease.py``); ``--standby`` waits for it."""
    levels = ("debug", "info", "warning", "error")
    if log_level.lower() not in levels:
        _fail(f"--log-level must be one of {', '.join(levels)}; got {log_level!r}")
    if log_format not in LOG_FORMATS:
        _fail(f"--log-format must be one of {', '.join(LOG_FORMATS)}; got {log_format!r}")
    workers = parse_api_workers(api_workers)
    _run(
        host,
        port,
        db,
        emulate_gpus,
        config,
        backend,
        home or default_home(),
        log_level,
        log_format,
        workers,
        standby,
    )


def _run(
    host: str,
    port: int,
    db: str | None,
    emulate_gpus: str | None,
    config: Path | None,
    backend: str | None,
    home: Path,
    log_level: str,
    log_format: str,
    workers: int,
    standby: bool = False,
) -> None:
    """Bind the port, fork the workers (they wait), take the controller lease (refused, or
    with ``standby`` waited for), open the store, then serve until SIGTERM or SIGINT
    (``gpudock.server.serve``); the workers listen once released. A standby on
    PostgreSQL serves the API as a follower while it waits (``gpudock.server.follow``),
    and its workers serve on when it takes over. A lease lost to another server while
    the database was away stops this one (exit 2)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, OperationalError

    import gpudock.api.worker  # noqa: F401  (forked workers share this import)
    from gpudock.config import load_config
    from gpudock.core.errors import GpudockError
    from gpudock.executors.base import BackendRefused
    from gpudock.runtime.lease import ControllerLease, LeaseHeld
    from gpudock.runtime.reload import Reloads
    from gpudock.runtime.wakeup import socket_channel
    from gpudock.runtime.workers import Supervisor
    from gpudock.server import bind, follow, join_cluster, open_cluster, serve, write_client_config
    from gpudock.store.db import default_url

    # After the imports: some log at import time (alembic's plugins), before any handler.
    configure_logging(log_level, "json" if log_format == "json" else "text", process="controller")
    reloads = Reloads().install()  # a SIGHUP while the server starts is owed, not fatal
    try:
        cfg = load_config(config)
        if backend is not None:
            cfg = cfg.model_copy(update={"backend": backend})
        sqlite = make_url(db).get_backend_name() == "sqlite" if db else True
    except (GpudockError, ValueError) as exc:
        _fail(str(exc))
    except ArgumentError as exc:
        _fail(f"--db {db!r} is not a database URL ({exc}); e.g. postgresql+psycopg://user@host/db")
    try:
        listener = bind(host, port)
    except OSError as exc:
        _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    wake_pair = socket_channel() if sqlite else None
    inherited = (listener.fileno(), *([wake_pair[1].fileno()] if wake_pair else []))
    supervisor = Supervisor(workers, inherited)
    supervisor.launch()  # they import while the store opens
    # a standby stops cleanly while it waits (its workers may serve); a leader's start is
    # interrupted as any process's, until it serves
    stop = _stop_on_signals(supervisor) if standby else None
    lease = ControllerLease(db or default_url(home))
    following: list[Following] = []

    def join() -> bool:
        """A standby on PostgreSQL serves the API while it waits (False: not yet)."""
        assert db is not None
        try:
            joined = join_cluster(home, cfg, db, emulate_gpus)
        except OperationalError as exc:  # the database is away: try again at the next wait
            log.warning("standby: cannot read the database yet (%s)", _first_line(exc))
            return False
        if joined is None:
            return False
        write_client_config(home, host, port)
        following.append(follow(joined, supervisor, listener, log_level, log_format))
        log.info("following: serving http://%s:%d until this server leads", host, port)
        return True

    try:
        # before the store is touched: one controller per database
        if not lease.take(standby, stop, None if sqlite else join):
            _stop_following(following, supervisor)
            lease.release()
            return
        opened = open_cluster(home, cfg, db_url=db, emulate_gpus=emulate_gpus)
        opened.db.fence = lease.write_fence()  # the controller writes only while it leads
    except BaseException as exc:
        _stop_following(following, supervisor)
        lease.release()
        if isinstance(exc, (GpudockError, ValueError, BackendRefused, LeaseHeld)):
            _fail(str(exc))
        if isinstance(exc, ArgumentError):
            _fail(
                f"--db {db!r} is not a database URL ({exc}); e.g. postgresql+psycopg://user@host/db"
            )
        if isinstance(exc, (OperationalError, OSError)):
            _fail(f"cannot open the database: {_first_line(exc)}")
        raise
    write_client_config(home, host, port)
    _announce(home, opened.new_admin_token, log_format == "json")
    split = serve(
        opened,
        supervisor,
        listener,
        wake_pair,
        log_level,
        log_format,
        following[0] if following else None,
    )
    reloads.ready(split.ctx, config)  # SIGHUP reloads the file's scheduling config
    log.info("serving http://%s:%d with %d API worker%s", host, port, workers, "s"[: workers - 1])
    lost: list[str] = []

    def lease_lost(why: str) -> None:
        lost.append(why)
        os.kill(os.getpid(), signal.SIGTERM)  # stop as an operator's SIGTERM would

    if stop is None:
        stop = _stop_on_signals(supervisor)
    lease.watch(lease_lost)
    while not stop.wait(1.0):
        pass
    split.stop()
    lease.release()
    if lost:
        _fail(lost[0])


def _first_line(exc: BaseException) -> str:
    """A database error's first line (the driver's own message where there is one)."""
    return str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]


def _stop_following(following: list[Following], supervisor: Supervisor) -> None:
    """Stop a follower's workers and socket, or only the (unreleased) workers."""
    if following:
        following[0].stop()
    else:
        supervisor.stop()


def _announce(home: Path, token: str | None, json_logs: bool) -> None:
    """Show a new admin token once (never in a JSON log line)."""
    if token and json_logs:
        log.warning("admin token created; it is in %s", home / "admin-token")
    elif token:
        err.print(
            f"[bold]admin token[/] (shown once; also saved to {home / 'admin-token'}):\n  {token}",
            highlight=False,
        )


def _stop_on_signals(supervisor: Supervisor) -> threading.Event:
    """An event set by SIGTERM or SIGINT; from then on no worker is restarted."""
    stop = threading.Event()

    def handler(_signum: int, _frame: FrameType | None) -> None:
        supervisor.closing()
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop
