"""/v1/nodes and /v1/gpus: the inventory."""

from __future__ import annotations

from fastapi import APIRouter

from gpudock.api.deps import CurrentUser, Inventory
from gpudock.api.schemas import GpuOut, NodeOut

router = APIRouter(prefix="/v1", tags=["inventory"])


@router.get("/nodes", response_model=list[NodeOut])
def nodes(_: CurrentUser, inventory: Inventory) -> list[NodeOut]:
    return [NodeOut.of(n) for n in inventory.nodes()]


@router.get("/gpus", response_model=list[GpuOut])
def gpus(_: CurrentUser, inventory: Inventory) -> list[GpuOut]:
    return [GpuOut.of(g) for g in inventory.gpus()]
