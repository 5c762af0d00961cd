"""/v1/queues: each queue's usage against its quota and fair share."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from gpudock.api.deps import CurrentUser, Queues

router = APIRouter(prefix="/v1", tags=["queues"])


@router.get("/queues")
def queues(_: CurrentUser, service: Queues) -> dict[str, Any]:
    """Capacity, unguaranteed capacity, and per queue: usage (GPU-equivalents, GPU
    memory bytes, CPUs), running and pending jobs, guarantee, limit, borrowed,
    lendable, fair-share entitlement and (effective) dominant share; plus warnings."""
    return service.report()
