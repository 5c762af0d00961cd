"""What the controller publishes for the API processes, in the ``meta`` table.

The controller's process holds two things the API answers with: the latest
plan's GPU reservations (``GET /v1/gpus``: ``reserved_for``) and the queues'
decayed usage (fair share in ``/v1/queues``, estimates and ``/metrics``). An
API process reads them here, from whichever host it runs on:

* ``reservations``: written by the controller when a cycle's differ from the
  last ones written (a cycle with nothing pending publishes none);
* the usage history: written by the controller every ``HISTORY_EVERY`` seconds;
  a reader advances it to its own snapshot's time with that snapshot's usage
  (``history_at``), as the controller's next cycle would.

Only the controller writes these keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session

from gpudock.queue import UsageHistory
from gpudock.scheduler.admission import queue_usage
from gpudock.scheduler.snapshot import ReservedGpus, Snapshot
from gpudock.store import meta as meta_store

RESERVATIONS_KEY = "reservations"
HISTORY_KEY = "fair_share_history"
HISTORY_EVERY = 10.0  # seconds between two writes of the usage history


def put_reservations(session: Session, reservations: Sequence[ReservedGpus]) -> None:
    """Publish the latest plan's reservations (replacing the last ones)."""
    meta_store.put_json(session, RESERVATIONS_KEY, [_reservation(r) for r in reservations])


def get_reservations(session: Session) -> tuple[ReservedGpus, ...]:
    """The reservations last published; () when none were."""
    rows = meta_store.get_json(session, RESERVATIONS_KEY) or []
    return tuple(
        ReservedGpus(r["job"], r["user"], r["node"], tuple(r["gpus"]), r["start"]) for r in rows
    )


def put_history(session: Session, history: UsageHistory) -> None:
    """Publish the queues' usage history."""
    meta_store.put_json(session, HISTORY_KEY, history.to_dict())


def get_history(session: Session) -> UsageHistory | None:
    """The usage history last published; None when none was."""
    saved = meta_store.get_json(session, HISTORY_KEY)
    return UsageHistory.from_dict(saved) if saved else None


def history_at(session: Session, snapshot: Snapshot, half_life: float) -> UsageHistory | None:
    """The published history advanced to ``snapshot.now`` with its usage; None when none
    was published (no queue has been used yet)."""
    history = get_history(session)
    if history is None:
        return None
    if history.half_life != half_life:  # a live change applies, as in the controller
        history = replace(history, half_life=half_life)
    return history.advance(snapshot.now, queue_usage(snapshot))


def _reservation(r: ReservedGpus) -> dict[str, Any]:
    return {"job": r.job_id, "user": r.user, "node": r.node, "gpus": list(r.gpus), "start": r.start}
