"""``SIGHUP``: reload the config file's scheduling part, with the rules of an apply.

The file's priority classes, queues and this node's labels and taints
replace the config in force (other nodes keep theirs), validated exactly as
``gpudock admin apply`` is: refused whole on any error, which is logged, and
the old config stays. Other sections of the file (executor, api, ...) take
effect only at a restart; a reload never reads them.
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType

from gpudock.cluster_config import ClusterConfig
from gpudock.config import load_config
from gpudock.core.errors import GpudockError
from gpudock.runtime.context import RuntimeContext
from gpudock.services.admin import AdminService

log = logging.getLogger("gpudock.admin")


def reload_file(ctx: RuntimeContext, path: Path | None) -> bool:
    """Apply the scheduling part of the file at ``path`` as ``sighup``; False if refused.

    Never raises for a bad file or config: the error is logged.
    """
    if path is None:
        log.warning("SIGHUP: the server runs without --config; nothing to reload")
        return False
    service = AdminService(ctx)
    try:
        file = load_config(path)
        nodes = dict(service.in_force().config.nodes)
        mine = ClusterConfig.of_server(file, ctx.node_name).nodes.get(ctx.node_name)
        nodes.pop(ctx.node_name, None)
        if mine is not None:
            nodes[ctx.node_name] = mine
        new = ClusterConfig(
            priority_classes=file.scheduler.priority_classes,
            queues=file.scheduler.queues,
            nodes=nodes,
        )
        version, changes = service.apply_as(new, "sighup", "sighup")
    except GpudockError as exc:
        log.error("SIGHUP: config reload refused, the config in force is unchanged: %s", exc)
        return False
    except Exception:  # e.g. the database is down: logged, the config stays
        log.exception("SIGHUP: config reload failed, the config in force is unchanged")
        return False
    log.warning(
        "SIGHUP: %s reloaded as config version %d (%d changes)", path, version, len(changes)
    )
    return True


class Reloads:
    """``SIGHUP``'s handler, installed before the server serves anything.

    Until ``ready``, a ``SIGHUP`` is remembered (the server is still starting:
    its workers may already answer, its controller cannot reload yet) and
    applied once by ``ready``; from then on each one reloads ``path`` in a
    thread (never inside the signal handler). Without it, a ``SIGHUP`` that
    came while the server started would end it.
    """

    def __init__(self) -> None:
        self._ctx: RuntimeContext | None = None
        self._path: Path | None = None
        self._owed = False

    def install(self) -> Reloads:
        signal.signal(signal.SIGHUP, self._handler)
        return self

    def ready(self, ctx: RuntimeContext, path: Path | None) -> None:
        """The controller runs on ``ctx``: reload ``path`` on each ``SIGHUP``, and now
        if one came while the server started."""
        self._path = path
        self._ctx = ctx  # the handler reads it: set last, after the path
        if self._owed:
            self._owed = False
            self._reload(ctx)

    def _handler(self, _signum: int, _frame: FrameType | None) -> None:
        ctx = self._ctx
        if ctx is None:
            self._owed = True
        else:
            self._reload(ctx)

    def _reload(self, ctx: RuntimeContext) -> None:
        threading.Thread(
            target=reload_file, args=(ctx, self._path), name="gpudock-reload", daemon=True
        ).start()
