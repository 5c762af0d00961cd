"""``SharePrice``: the pre-score plugin that prices one-GPU shares once per cycle.

When a scorer of the cycle's profile ``reads`` ``SharePricing`` (``binpack``
with ``price_shares``, the default) and a pending job is a share of one GPU on
one node (``mix.priced``), ``pre_score`` works out the ``SharePricing`` of the
snapshot's job mix (``pricing_for``: one LP per rounded mix) and writes it into
the cycle's ``CycleState``. The scorers that read it score one-GPU shares by it,
and the ``best_fit`` picker, finding it there, takes the GPU they scored.
Otherwise nothing is written, and nothing is priced.

What it keeps lives in the caller's session (``ShareState``, through
``framework.PluginState``), never in the plugin object or class variables:

* the largest GPU memory of the last node tuple (``pricing.LargestMemo``);
* a ``MixTracker``, read only when the session learns
  (``SchedulerSession(learn=True)``): the mix then follows the tracker's
  published mix, as the server and the simulator price shares. Without it
  the mix is the snapshot's own, and the Plan a function of the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.framework import PluginState, Profile, reads
from gpudock.scheduler.policies.share_price import lp
from gpudock.scheduler.policies.share_price.mix import MixTracker, priced
from gpudock.scheduler.policies.share_price.pricing import (
    LargestMemo,
    SharePricing,
    pricing_for,
)
from gpudock.scheduler.snapshot import JobRequest, Snapshot


@dataclass(slots=True)
class ShareState:
    """What ``SharePrice`` keeps between one caller's cycles (module doc)."""

    largest: LargestMemo = field(default_factory=LargestMemo)
    mix: MixTracker = field(default_factory=MixTracker)


class SharePrice:
    """Pre-score plugin: the cycle's share prices, for ``binpack`` and ``best_fit``."""

    name = "share_price"

    def pre_score(
        self, snapshot: Snapshot, profile: Profile, state: CycleState, kept: PluginState
    ) -> None:
        """Write this cycle's ``SharePricing`` into ``state`` (module doc); nothing when no
        scorer reads it, no pending job is priced, or the mix has no share."""
        if not prices_shares(profile) or not any(priced(j) for j in snapshot.pending):
            return
        mine = kept.get(ShareState)
        if kept.learn:
            snapshot = mine.mix.apply(snapshot)
        pricing = pricing_for(snapshot, mine.largest)
        if pricing is not None:
            state.write(pricing)

    def prepare(self, profile: Profile) -> None:
        """Import the LP solver (SciPy: most of a second the first time) when ``profile``
        prices shares."""
        if prices_shares(profile):
            lp.warm()

    def relevant(self, job: JobRequest) -> bool:
        """True for the jobs this plugin prices (``mix.priced``)."""
        return priced(job)


def prices_shares(profile: Profile) -> bool:
    """True when a scorer of ``profile`` reads the job mix's share prices."""
    return any(SharePricing in reads(s) for s, _ in profile.scorers)
