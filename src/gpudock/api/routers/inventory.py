"""/v1/nodes and /v1/gpus: the inventory."""

from __future__ import annotations

from fastapi import APIRouter

from gpudock.api.deps import CurrentUser, Inventory
from gpudock.api.routing import OneHop
from gpudock.api.schemas import GpuOut, NodeOut, ReservedForOut

router = APIRouter(prefix="/v1", tags=["inventory"], route_class=OneHop)


@router.get("/nodes", response_model=list[NodeOut])
def nodes(_: CurrentUser, inventory: Inventory) -> list[NodeOut]:
    return [NodeOut.of(n, inventory.warnings(n)) for n in inventory.nodes()]


@router.get("/gpus", response_model=list[GpuOut])
def gpus(principal: CurrentUser, inventory: Inventory) -> list[GpuOut]:
    reserved = inventory.reservations(principal)
    migs = inventory.mig_devices()
    out = [GpuOut.of(g, [m for m in migs if m.parent_uuid == g.uuid]) for g in inventory.gpus()]
    for gpu in out:
        held = reserved.get((gpu.node, gpu.index))
        if held is not None:
            gpu.reserved_for = ReservedForOut(job=held.job, user=held.user, eta=held.eta)
    return out
