"""Inventory use cases: nodes and GPUs as users see them."""

from __future__ import annotations

from gpudock.core.inventory import Gpu, Node
from gpudock.runtime.context import RuntimeContext
from gpudock.store import inventory as inv_store


class InventoryService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def nodes(self) -> list[Node]:
        with self.ctx.db.read() as session:
            return inv_store.list_nodes(session)

    def gpus(self) -> list[Gpu]:
        with self.ctx.db.read() as session:
            return inv_store.list_gpus(session)
