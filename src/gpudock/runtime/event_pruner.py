"""Prune the event log by age and count (``events:`` in the server config)."""

from __future__ import annotations

import logging

from gpudock.core.events import EventsConfig
from gpudock.runtime.context import RuntimeContext
from gpudock.store import events as event_store
from gpudock.store.db import Database

log = logging.getLogger("gpudock.events")


class EventPruner:
    """Called from the controller's reconcile loop; prunes at most every ``prune_interval``."""

    def __init__(self) -> None:
        self._last: float | None = None

    def maybe_prune(self, ctx: RuntimeContext) -> int:
        """Prune if ``prune_interval`` has passed since the last run; return events deleted."""
        return self.tick(ctx.db, ctx.config.events, ctx.clock())

    def tick(self, db: Database, config: EventsConfig, now: float) -> int:
        """``maybe_prune`` with its database, bounds and time given (``now`` from any clock)."""
        if self._last is not None and now - self._last < config.prune_interval:
            return 0
        self._last = now
        with db.write() as session:  # its own short transaction
            deleted = event_store.prune(session, now, config.max_age, config.max_count)
        if deleted:
            log.info("pruned %d events", deleted)
        return deleted
