"""The scrape-time collector: store facts and NVML readings as metric families.

Every family here is computed when Prometheus scrapes, from one
``read_store`` batch (plus, on a host with real GPUs, one NVML read), so
the numbers are as fresh as the store and cost nothing between scrapes.

The store's families are ``Gauge``s that write each series straight to a
line of the text format: a scrape of thousands of series allocates strings,
not one label dict and sample tuple per series, so it stays cheap and leaves
the cyclic garbage collector little to traverse or promote.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.exposition import generate_latest

from gpudock.gcpause import collector_paused
from gpudock.gpus.nvml import NvmlUnavailable
from gpudock.gpus.telemetry import GpuTelemetry, read_telemetry
from gpudock.metrics.gauges import (
    ALLOCATION_LABELS,
    CONTENT_TYPE,
    GPU_LABELS,
    Gauge,
    gpu_families,
    model_of,
    render_gauges,
)
from gpudock.metrics.runtime import RuntimeMetrics
from gpudock.metrics.store import StoreFacts, read_store
from gpudock.queue.resources import Limits, Resources
from gpudock.runtime import control
from gpudock.runtime.context import RuntimeContext

log = logging.getLogger("gpudock.metrics")

Telemetry = Callable[[], Mapping[str, GpuTelemetry]]
__all__ = [
    "ALLOCATION_LABELS",
    "CONTENT_TYPE",
    "GPU_LABELS",
    "Gauge",
    "StoreCollector",
    "exposition",
    "gpu_families",
    "model_of",
    "render_gauges",
    "scrape",
]


def exposition(runtime: RuntimeMetrics, store: StoreCollector) -> bytes:
    """One scrape in Prometheus' text format (0.0.4): the runtime's metrics, then the store's.

    The cyclic garbage collector is paused for the scrape (``collector_paused``):
    a scrape creates no reference cycles, so what it drops is freed at once
    instead of being traversed and promoted by collections inside it. The
    pause is process-wide and spans the scrape's queries: other threads'
    cyclic garbage waits for it, as it waits for a scheduling cycle.
    """
    with collector_paused():
        return generate_latest(runtime.registry) + render_gauges(store.collect())


def scrape(ctx: RuntimeContext) -> bytes:
    """What ``GET /metrics`` answers: the exposition of the process running the controller.

    An API worker (``ctx.control_address`` set) asks its controller
    (``runtime/control.py``); when that cannot answer (it is restarting), it
    answers itself: the store's families, from a snapshot it loads, and no
    runtime counters (logged as a warning).
    """
    if ctx.control_address is not None:
        try:
            return control.ask(ctx.control_address)
        except OSError as exc:
            log.warning("the controller did not answer a scrape (%s); answering alone", exc)
    return exposition(ctx.metrics, StoreCollector(ctx))


class StoreCollector:
    """Families computed from the store (and NVML) at scrape time."""

    def __init__(self, ctx: RuntimeContext, telemetry: Telemetry = read_telemetry) -> None:
        self.ctx = ctx
        self.telemetry = telemetry

    def collect(self) -> Iterator[Gauge]:
        """Every store family of one scrape, from one read-only session."""
        ctx, now = self.ctx, self.ctx.clock()
        snapshot = ctx.published_snapshot()  # None: no fresh one; read the store instead
        with ctx.db.read() as session:
            ctx.sync(session)
            facts = read_store(session, now, ctx.config.scheduler.queues, snapshot)
        yield from gpu_families(facts.gpus, facts.held, self._readings(facts))
        yield from queue_families(facts)
        yield from job_and_node_families(facts)

    def _readings(self, facts: StoreFacts) -> Mapping[str, GpuTelemetry]:
        """Node agents' latest readings, and NVML's when this node has real GPUs (NVML
        failing: none of this node's)."""
        readings: dict[str, GpuTelemetry] = {}
        for node_readings in list(self.ctx.node_telemetry.values()):
            readings.update(node_readings)
        if not any(g.node == self.ctx.node_name and not g.emulated for g in facts.gpus):
            return readings
        try:
            readings.update(self.telemetry())
        except NvmlUnavailable as err:
            log.debug("no GPU telemetry: %s", err)
        return readings


def queue_families(facts: StoreFacts) -> Iterator[Gauge]:
    """Usage against guarantee, limit and fair share; decayed usage; pending by reason."""
    names = (
        ("gpus_in_use", "GPUs held by the queue's jobs (shares count as fractions)."),
        ("gpu_memory_in_use_bytes", "GPU memory held by the queue's jobs."),
        ("guarantee_gpus", "GPUs guaranteed to the queue."),
        ("guarantee_gpu_memory_bytes", "GPU memory guaranteed to the queue."),
        ("limit_gpus", "The queue's GPU limit (absent: no limit)."),
        ("limit_gpu_memory_bytes", "The queue's GPU memory limit (absent: no limit)."),
        ("fair_share_gpus", "The queue's fair-share entitlement in GPUs."),
        ("fair_share_gpu_memory_bytes", "The queue's fair-share entitlement in GPU memory."),
        ("decayed_usage_gpus", "The queue's decayed average GPU usage (fair-share history)."),
        ("decayed_usage_gpu_memory_bytes", "The queue's decayed average GPU memory usage."),
    )
    families = {name: Gauge(f"gpudock_queue_{name}", text, ["queue"]) for name, text in names}
    history = facts.history
    for row in facts.queues.queues:
        decayed = history.average(row.name) if history is not None else (0.0, 0.0, 0.0)
        values = {
            **_pair("in_use", row.usage),
            **_pair("guarantee", row.guarantee),
            **_pair("limit", row.limit),
            **_pair("fair_share", row.fair_share),
            "decayed_usage_gpus": decayed[0],
            "decayed_usage_gpu_memory_bytes": decayed[1],
        }
        labels = families["gpus_in_use"].labels(row.name)
        for name, value in values.items():
            if value is not None:
                families[name].add(labels, value)
    yield from families.values()
    pending = Gauge(
        "gpudock_queue_pending_jobs",
        "Pending jobs by queue and the layer of their first pending reason.",
        ["queue", "reason"],
    )
    for (queue, reason), count in sorted(facts.pending.items()):
        pending.add(pending.labels(queue, reason), count)
    yield pending


def _pair(prefix: str, vector: Resources | Limits) -> dict[str, float | None]:
    gpus, memory = vector.gpus, vector.gpu_memory
    key = "gpus_in_use" if prefix == "in_use" else f"{prefix}_gpus"
    mem_key = "gpu_memory_in_use_bytes" if prefix == "in_use" else f"{prefix}_gpu_memory_bytes"
    return {
        key: None if gpus is None else float(gpus),
        mem_key: None if memory is None else float(memory),
    }


def job_and_node_families(facts: StoreFacts) -> Iterator[Gauge]:
    """Job counts by state and queue; node readiness and cordon."""
    jobs = Gauge("gpudock_jobs", "Jobs by state and queue.", ["state", "queue"])
    for (state, queue), count in sorted(facts.jobs.items()):
        jobs.add(jobs.labels(state, queue), count)
    yield jobs
    ready = Gauge("gpudock_node_ready", "1 when the node is available.", ["node"])
    cordoned = Gauge(
        "gpudock_node_cordoned", "1 when the node carries a NoSchedule taint.", ["node"]
    )
    for node in facts.nodes:
        labels = ready.labels(node.name)
        ready.add(labels, 1 if node.ready else 0)
        cordoned.add(labels, 1 if node.cordoned else 0)
    yield ready
    yield cordoned
