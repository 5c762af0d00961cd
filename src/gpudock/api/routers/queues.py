"""/v1/queues: each queue's usage against its quota and fair share."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gpudock.api.deps import CurrentUser, Queues
from gpudock.api.routing import OneHop

router = APIRouter(prefix="/v1", tags=["queues"], route_class=OneHop)


@router.get("/queues")
def queues(user: CurrentUser, service: Queues) -> dict[str, Any]:
    """Capacity, unguaranteed capacity, and per queue: usage (GPU-equivalents, GPU
    memory bytes, CPUs), running and pending jobs, guarantee, limit, borrowed,
    lendable, fair-share entitlement and (effective) dominant share; plus warnings.

    Per queue also ``max_pending_per_user`` and the caller's standing ``you``
    (member, may_submit, pending, max_pending); admins also see ``members``
    (null: open to all) and the top-level ``groups``."""
    return service.report(user)
