"""Where the capacity index (``scheduler/accel/``) still finds share pricing's names.

Share pricing is the plugin ``policies/share_price/``; this module only re-exports the
two names the index reads, until the index imports them from there.
"""

from gpudock.scheduler.policies.share_price.mix import priced
from gpudock.scheduler.policies.share_price.pricing import SharePricing

__all__ = ["SharePricing", "priced"]
