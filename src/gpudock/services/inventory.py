"""Inventory use cases: nodes and GPUs as users see them."""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpudock.core.cluster import NodeFacts, agent_live
from gpudock.core.inventory import Gpu, MigDevice, Node
from gpudock.core.job_defaults import cpu_shortfall
from gpudock.runtime.context import RuntimeContext
from gpudock.store import inventory as inv_store
from gpudock.store import published
from gpudock.store.tokens import Principal


@dataclass(frozen=True, slots=True)
class ReservedFor:
    """Who a GPU is reserved for, as ``principal`` may see it.

    ``job`` and ``user`` are None unless the reserving job is the
    principal's own or the principal is an admin (other users' jobs are
    "another job", as they are 404 elsewhere in the API). ``eta``: the
    expected start (epoch seconds), None when unknown.
    """

    job: int | None
    user: str | None
    eta: float | None


def _agent(node: Node, now: float, interval: float) -> str | None:
    """``watched`` (its agent reports), ``silent`` (it did, not lately), ``unwatched``."""
    if node.engine_state is None:
        return None
    if node.agent_seen_at is None:
        return "unwatched"
    facts = NodeFacts(node.name, node.engine_state, node.availability or "active",
                      agent_seen_at=node.agent_seen_at)  # fmt: skip
    return "watched" if agent_live(facts, now, interval) else "silent"


class InventoryService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def nodes(self) -> list[Node]:
        """Every node; a multi-node engine's say whether an agent watches them (``agent``)."""
        with self.ctx.db.read() as session:
            nodes = inv_store.list_nodes(session)
        if not self.ctx.cluster:
            return nodes
        now, interval = self.ctx.clock(), self.ctx.config.swarm.agent_interval
        return [replace(n, agent=_agent(n, now, interval)) for n in nodes]

    def warnings(self, node: Node) -> list[str]:
        """What is wrong with ``node``'s configuration: a CPU count that lets fewer jobs
        run at once than it has GPUs, under the server's ``job_defaults``."""
        short = cpu_shortfall(len(node.gpus), node.cpus, self.ctx.config.job_defaults)
        return [] if short is None else [short]

    def gpus(self) -> list[Gpu]:
        with self.ctx.db.read() as session:
            return inv_store.list_gpus(session)

    def mig_devices(self) -> list[MigDevice]:
        with self.ctx.db.read() as session:
            return inv_store.list_mig_devices(session)

    def reservations(self, principal: Principal) -> dict[tuple[str, int], ReservedFor]:
        """``(node, GPU index) -> ReservedFor`` from the latest scheduling cycle's Plan.

        As the controller published it (``store/published.py``): empty when
        nothing is pending.
        """
        with self.ctx.db.read() as session:
            reservations = published.get_reservations(session)
        found: dict[tuple[str, int], ReservedFor] = {}
        for r in reservations:
            mine = principal.is_admin or r.user == principal.user
            shown = ReservedFor(r.job_id if mine else None, r.user if mine else None, r.start)
            for index in r.gpus:
                found[(r.node, index)] = shown
        return found
