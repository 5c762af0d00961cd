"""Step 0 of the cycle: held jobs leave it before anything else sees them.

A job held with ``gpudock hold`` (``JobRequest.held_by``) is never tried,
never counted as demand (fair share, pricing, reservations) and never
preempts: ``withhold`` takes it out of the snapshot and gives it a ``hold``
pending reason naming who holds it. Pure, like the rest of the cycle; a
snapshot without held jobs comes back as the very same object.

The store backs this up: ``store.jobs.transition`` never moves a held job
to ALLOCATED, so a hold that lands after the snapshot was read still wins.
"""

from __future__ import annotations

from dataclasses import replace

from gpudock.core.job import PendingReason
from gpudock.scheduler.snapshot import Snapshot

__all__ = ["held_reason", "withhold"]

LAYER = "hold"


def held_reason(by: str) -> PendingReason:
    """Why a held job waits: who holds it, and what lets it run."""
    return PendingReason(LAYER, f"held by {by}", "runs once released (gpudock release JOB)")


def withhold(snapshot: Snapshot) -> tuple[Snapshot, dict[int, list[PendingReason]]]:
    """The snapshot without its held pending jobs, and each held job's reason."""
    held = {job.id: [held_reason(job.held_by)] for job in snapshot.pending if job.held_by}
    if not held:
        return snapshot, held
    pending = tuple(job for job in snapshot.pending if job.id not in held)
    return replace(snapshot, pending=pending), held
