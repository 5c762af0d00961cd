"""``PricedFragmentation``: FGD's ``F_n`` with shares ranked by what they lose at the
workload's cutting-stock prices (``lp.py``).

The measure of the experimental ``fgd_adaptive`` policy: it lives here, with
the prices it reads, so that the policy imports the share-price plugin and
never the other way round. The default ``binpack`` reads the same prices
through ``SharePricing`` (``pricing.py``).
"""

from __future__ import annotations

from gpudock.scheduler.policies.share_price import lp
from gpudock.scheduler.workload import (
    STRANDED_WEIGHT,
    CpuLimitedFragmentation,
    NodeSummary,
    Workload,
)

FRAGMENT_WEIGHT = 0.01
"""How much FGD's fragments count beside the price lost: a tie-break."""


class PricedFragmentation(CpuLimitedFragmentation):
    """``CpuLimitedFragmentation`` that ranks placements of shares by what they lose at the
    workload's cutting-stock prices (``lp.py``), before FGD's fragments.

    ``F_n`` here is ``STRANDED_WEIGHT x stranded - sum_g value(f_g) + FRAGMENT_WEIGHT x
    fragments``, with ``f_g`` the free thousandths of each GPU and ``value`` the table of
    ``lp.values`` for the workload's share sizes (on the price grid,
    ``lp.priced_size``), weighted by popularity. A placement's rise of the middle
    term is the worth its GPUs lose at those prices: the same on every node for whole-GPU
    jobs (an idle GPU is worth 1) and for CPU-only jobs (nothing), so for them nodes are
    compared as by ``CpuLimitedFragmentation``.
    """

    def __init__(self, workload: Workload) -> None:
        super().__init__(workload)
        demand: dict[int, float] = {}
        for whole, share, _, p in self._tasks:
            if not whole:
                size = lp.priced_size(share)
                demand[size] = demand.get(size, 0.0) + p
        self._value = lp.values(lp.prices(demand))

    def _compute(self, summary: NodeSummary) -> float:
        fragments, stranded = self.parts(summary)
        value = self._value
        worth = sum(value[f] for f in summary[0])
        return STRANDED_WEIGHT * stranded - worth + FRAGMENT_WEIGHT * fragments
