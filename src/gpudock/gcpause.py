"""``collector_paused``: run a unit of work with Python's cyclic garbage collector off.

Only for work that creates no reference cycles, so that everything it drops
is freed by reference counting at once; a test of each user checks that it
leaves no cyclic garbage (``tests/unit/scheduler/test_cycle_memory.py``,
``tests/unit/metrics/test_collector.py``).
"""

from __future__ import annotations

import gc

__all__ = ["collector_paused"]


class collector_paused:  # a context manager named as the function it replaced
    """Pause Python's cyclic garbage collector for one unit of work; restore its state after.

    Used around a scheduling cycle (``scheduler.cycle.run_cycle``) and a
    ``/metrics`` scrape (``metrics.collector.exposition``). Each allocates
    many short-lived containers while keeping its own structures alive to
    the end, so every collection inside it would traverse those structures
    again and promote them, and full collections (tens of milliseconds on a
    1,000-node snapshot) would land inside it. Neither creates reference
    cycles (a cycle's verdicts and boards point at their catalog and search,
    never back; tests check that each leaves no cyclic garbage), so
    everything it drops is freed by reference counting at once, and the
    next collection, after it, finds little: in
    ``benchmarks/scheduler_scale.py`` the collector's total time over the
    latency run falls about tenfold. Only an enabled collector is paused and
    re-enabled, so nested or concurrent uses leave it as they found it.

    A class rather than a generator: leaving a generator-based context
    allocates (its ``StopIteration``) right after the collector is back on,
    which started the collection the work's allocations had called for
    inside it, a full one now and then (20-26 ms, three times in the
    benchmark's 300 latency cycles). Leaving this one allocates nothing, so
    that collection runs at the caller's next allocation, after the work;
    ``scheduler_scale.py`` reports it (``gc_between_cycles_ms``) and
    ``metrics_scrape.py`` counts it (``gc_ms_per_scrape``).
    """

    __slots__ = ("_enabled",)

    def __enter__(self) -> None:
        self._enabled = gc.isenabled()
        if self._enabled:
            gc.disable()

    def __exit__(self, *_: object) -> None:
        if self._enabled:
            gc.enable()
