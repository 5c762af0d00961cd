"""``gpudock server``: start the embedded single-host server.

The server side (uvicorn, SQLAlchemy, the app) is imported inside the command,
so that loading the CLI for a client command stays light.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from gpudock.cli.common import fail, lazy_console
from gpudock.home import default_home
from gpudock.logfmt import LOG_FORMATS, JsonFormatter
from gpudock.logfmt import configure as configure_logging

err = lazy_console(stderr=True)
log = logging.getLogger("gpudock.server")
STOP_GRACE_SECONDS = 3
"""How long a stop waits for open streaming requests before cutting them."""


def _fail(message: str) -> NoReturn:
    if any(isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers):
        log.critical("%s", message)  # --log-format json: stderr stays JSON lines
        raise typer.Exit(2)
    fail(message, 2)


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
    home: Annotated[Path | None, typer.Option(help="state dir; default $GPUDOCK_HOME")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error")] = "info",
    log_format: Annotated[
        str,
        typer.Option(
            help="text (human-readable) or json (one object per line)",
            envvar="GPUDOCK_LOG_FORMAT",
        ),
    ] = "text",
) -> None:
    """Start the gpudock server (API, scheduler, reconciler) on this host."""
    import uvicorn
    from sqlalchemy.exc import ArgumentError, OperationalError
    from uvicorn.config import LOGGING_CONFIG

    from gpudock.config import load_config
    from gpudock.core.errors import GpudockError
    from gpudock.runtime.reload import install_sighup
    from gpudock.server import build_server, write_client_config

    levels = ("debug", "info", "warning", "error")
    if log_level.lower() not in levels:
        _fail(f"--log-level must be one of {', '.join(levels)}; got {log_level!r}")
    if log_format not in LOG_FORMATS:
        _fail(f"--log-format must be one of {', '.join(LOG_FORMATS)}; got {log_format!r}")
    json_logs = log_format == "json"
    configure_logging(log_level, "json" if json_logs else "text")
    home = home or default_home()
    try:
        cfg = load_config(config)
        srv = build_server(home, cfg, db_url=db, emulate_gpus=emulate_gpus)
    except (GpudockError, ValueError) as exc:
        _fail(str(exc))
    except ArgumentError as exc:
        _fail(f"--db {db!r} is not a database URL ({exc}); e.g. postgresql+psycopg://user@host/db")
    except (OperationalError, OSError) as exc:
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        _fail(f"cannot open the database: {detail}")
    write_client_config(home, host, port)
    install_sighup(srv.ctx, config)  # SIGHUP reloads the file's scheduling config
    if srv.new_admin_token and json_logs:  # never a secret in a log line
        log.warning("admin token created; it is in %s", home / "admin-token")
    elif srv.new_admin_token:
        err.print(
            f"[bold]admin token[/] (shown once; also saved to {home / 'admin-token'}):\n"
            f"  {srv.new_admin_token}",
            highlight=False,
        )
    uvicorn.run(
        srv.app,
        host=host,
        port=port,
        log_level=log_level.lower(),
        access_log=False,
        log_config=None if json_logs else LOGGING_CONFIG,  # JSON: uvicorn logs through ours
        # open streams (log follows, exec sessions, dashboard sessions) would hold a stop
        timeout_graceful_shutdown=STOP_GRACE_SECONDS,
    )
