"""Prometheus metrics for ``GET /metrics``.

Two sources, one exposition:

* ``RuntimeMetrics`` (``runtime.py``): counters and histograms the runtime
  increments as things happen (jobs started and ended, scheduling cycles);
* ``StoreCollector`` (``collector.py``): gauges computed at scrape time from
  one read-only batch of store queries (``store.py``) and, on hosts with real
  GPUs, one NVML read (``gpus/telemetry.py``).

A scrape never takes the scheduler's lock and never writes. Every metric,
its labels and the alert rules built on them are listed in ``docs/metrics.md``.
"""

from __future__ import annotations

from gpudock.metrics.runtime import RuntimeMetrics

__all__ = ["RuntimeMetrics"]
