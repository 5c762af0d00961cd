"""Share pricing, one plugin: where one-GPU shares go at the job mix's cutting-stock prices.

* ``plugin.py``: ``SharePrice``, the pre-score plugin (``framework.PreScorePolicy``)
  the registry lists. Once per cycle it prices the job mix and hands the
  ``SharePricing`` to ``binpack`` (its score) and the ``best_fit`` picker (its GPU);
  it keeps its ``MixTracker`` and memo in the caller's session.
* ``pricing.py``: ``SharePricing`` (loss, stranded capacity, score, pick) and
  ``pricing_for`` (the prices of a snapshot's mix, memoized per rounded mix).
* ``mix.py``: which jobs are priced, the job mix and ``MixTracker``.
* ``lp.py``: the cutting-stock LP and its knapsack (SciPy, imported when first solved).
* ``fragmentation.py``: ``PricedFragmentation``, the same prices as a measure for the
  experimental ``fgd_adaptive``.

This package's ``__init__`` imports nothing, so that importing one module of it
(``binpack`` imports ``pricing``) does not import the plugin.
"""
