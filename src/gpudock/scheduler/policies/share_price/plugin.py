"""``SharePrice``: the pre-score plugin that prices one-GPU shares once per cycle.

When a cycle's profile has a ``binpack`` scorer that prices shares
(``price_shares``, the default) and a pending job is a share of one GPU on
one node (``mix.priced``), ``pre_score`` works out the ``SharePricing`` of
the snapshot's job mix (``pricing_for``: one LP per rounded mix) and returns
the profile with that pricing given to each such ``binpack`` and to a
``best_fit`` picker, so that the picker takes the GPU the scorer scored.
Otherwise it returns the profile unchanged, and nothing is priced.

What it keeps lives in the caller's session (``ShareState``, through
``framework.PluginState``), never in the plugin object or class variables:

* the largest GPU memory of the last node tuple (``pricing.LargestMemo``);
* a ``MixTracker``, read only when the session learns
  (``SchedulerSession(learn=True)``): the mix then follows the tracker's
  published mix, as the server and the simulator price shares. Without it
  the mix is the snapshot's own, and the Plan a function of the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpudock.scheduler.framework import PluginState, Profile
from gpudock.scheduler.policies.binpack import Binpack
from gpudock.scheduler.policies.gpu_picker import BestFitPicker
from gpudock.scheduler.policies.share_price import lp
from gpudock.scheduler.policies.share_price.mix import MixTracker, priced
from gpudock.scheduler.policies.share_price.pricing import LargestMemo, pricing_for
from gpudock.scheduler.snapshot import JobRequest, Snapshot


@dataclass(slots=True)
class ShareState:
    """What ``SharePrice`` keeps between one caller's cycles (module doc)."""

    largest: LargestMemo = field(default_factory=LargestMemo)
    mix: MixTracker = field(default_factory=MixTracker)


class SharePrice:
    """Pre-score plugin: the cycle's share prices, for ``binpack`` and ``best_fit``."""

    name = "share_price"

    def pre_score(self, snapshot: Snapshot, profile: Profile, state: PluginState) -> Profile:
        """``profile`` with this cycle's ``SharePricing`` bound (module doc); ``profile``
        itself when no scorer prices shares, no pending job is priced, or the mix has no
        share."""
        if not prices_shares(profile) or not any(priced(j) for j in snapshot.pending):
            return profile
        kept = state.get(ShareState)
        if state.learn:
            snapshot = kept.mix.apply(snapshot)
        pricing = pricing_for(snapshot, kept.largest)
        if pricing is None:
            return profile
        scorers = tuple(
            (s.with_pricing(pricing) if isinstance(s, Binpack) else s, w)
            for s, w in profile.scorers
        )
        picker = profile.picker
        if isinstance(picker, BestFitPicker):
            picker = BestFitPicker(pricing)
        return replace(profile, scorers=scorers, picker=picker)

    def prepare(self, profile: Profile) -> None:
        """Import the LP solver (SciPy: most of a second the first time) when ``profile``
        prices shares."""
        if prices_shares(profile):
            lp.warm()

    def relevant(self, job: JobRequest) -> bool:
        """True for the jobs this plugin prices (``mix.priced``)."""
        return priced(job)


def prices_shares(profile: Profile) -> bool:
    """True when a scorer of ``profile`` places shares by the job mix's prices."""
    return any(isinstance(s, Binpack) and s.price_shares for s, _ in profile.scorers)
