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
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest

from gpudock.gcpause import collector_paused
from gpudock.gpus.nvml import NvmlUnavailable
from gpudock.gpus.telemetry import GpuTelemetry, read_telemetry
from gpudock.metrics.runtime import RuntimeMetrics
from gpudock.metrics.store import GpuFacts, StoreFacts, read_store
from gpudock.queue.resources import Limits, Resources
from gpudock.runtime.context import RuntimeContext

log = logging.getLogger("gpudock.metrics")

GPU_LABELS = ("node", "gpu", "uuid", "model", "emulated")
ALLOCATION_LABELS = ("node", "gpu", "uuid", "model", "job", "user", "queue", "kind")
Telemetry = Callable[[], Mapping[str, GpuTelemetry]]
__all__ = ["CONTENT_TYPE", "Gauge", "StoreCollector", "exposition"]
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # what exposition() writes


class Gauge:
    """One gauge family, kept as lines of Prometheus' text format (0.0.4).

    ``labels(*values)`` formats one label set (values escaped; the names are
    ours and need none), and ``add(labels, value)`` writes one series with
    it, so a label set shared by several families is formatted once.
    """

    __slots__ = ("documentation", "label_names", "lines", "name")

    def __init__(self, name: str, documentation: str, label_names: Sequence[str]) -> None:
        self.name, self.documentation = name, documentation
        self.label_names = tuple(label_names)
        self.lines: list[str] = []

    def labels(self, *values: str) -> str:
        """The label set ``{names=values}`` as the text format writes it, without braces."""
        pairs = zip(self.label_names, values, strict=True)
        return ",".join([f'{name}="{_escape(value)}"' for name, value in pairs])

    def add(self, labels: str, value: float) -> None:
        """One series, with ``labels`` from ``labels()`` of a family with the same label names."""
        self.lines.append(f"{self.name}{{{labels}}} {_number(value)}\n")

    def text(self) -> str:
        """The family in the text format: HELP, TYPE, then its series in the order added."""
        doc = self.documentation.replace("\\", "\\\\").replace("\n", "\\n")
        return f"# HELP {self.name} {doc}\n# TYPE {self.name} gauge\n" + "".join(self.lines)


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


def render_gauges(families: Iterable[Gauge]) -> bytes:
    """Gauge families in the text format, in the order given."""
    return "".join([family.text() for family in families]).encode()


def _escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return value


def _number(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def model_of(name: str) -> str:
    """The GPU's model as NVML names it, without the emulator's suffix."""
    return name.removesuffix(" (emulated)")


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
            queues, history = ctx.config.scheduler.queues, ctx.queue_history
            facts = read_store(session, now, queues, history, snapshot)
        yield from gpu_families(facts, self._readings(facts))
        yield from queue_families(facts, ctx)
        yield from job_and_node_families(facts)

    def _readings(self, facts: StoreFacts) -> Mapping[str, GpuTelemetry]:
        """NVML readings, only when this node has real GPUs; {} when NVML fails."""
        if not any(g.node == self.ctx.node_name and not g.emulated for g in facts.gpus):
            return {}
        try:
            return self.telemetry()
        except NvmlUnavailable as err:
            log.debug("no GPU telemetry: %s", err)
            return {}


def gpu_families(facts: StoreFacts, readings: Mapping[str, GpuTelemetry]) -> Iterator[Gauge]:
    """Allocation info, health and telemetry per GPU.

    Emulated GPUs (``emulated="true"``) report the store's view: memory in use
    is what jobs reserved and utilisation is the allocated fraction; they
    have no temperature or power. Real GPUs report NVML's readings, when
    NVML answered on this node.
    """
    by_uuid = {g.uuid: g for g in facts.gpus}
    info = Gauge(
        "gpudock_gpu_allocation_info",
        "1 for each GPU (or share of one) held by a job; uuid joins dcgm-exporter's UUID.",
        ALLOCATION_LABELS,
    )
    for held in facts.held:
        gpu = by_uuid.get(held.gpu_uuid)
        if gpu is None:
            continue
        kind = "shared" if held.shared else "exclusive"
        where = (gpu.node, str(gpu.index), gpu.uuid, model_of(gpu.name))
        info.add(info.labels(*where, str(held.job_id), held.user, held.queue, kind), 1)
    yield info
    families = {
        name: Gauge(f"gpudock_gpu_{name}", text, GPU_LABELS)
        for name, text in (
            ("healthy", "1 when the GPU takes jobs; 0 unhealthy, missing, quarantined, cordoned."),
            ("allocated_ratio", "Fraction of the GPU held by jobs (exclusive: 1)."),
            ("utilization_ratio", "GPU utilisation 0..1 (emulated: the allocated fraction)."),
            ("memory_used_bytes", "GPU memory in use (emulated: reserved by jobs)."),
            ("memory_total_bytes", "GPU memory in total."),
            ("temperature_celsius", "GPU temperature (NVML only)."),
            ("power_watts", "GPU power draw (NVML only)."),
        )
    }
    healthy = families["healthy"]
    for gpu in facts.gpus:
        labels = healthy.labels(*_gpu_labels(gpu))  # formatted once for all its series
        for name, value in _gpu_values(gpu, readings.get(gpu.uuid)).items():
            if value is not None:
                families[name].add(labels, value)
    yield from families.values()


def _gpu_labels(gpu: GpuFacts) -> list[str]:
    emulated = "true" if gpu.emulated else "false"
    return [gpu.node, str(gpu.index), gpu.uuid, model_of(gpu.name), emulated]


def _gpu_values(gpu: GpuFacts, reading: GpuTelemetry | None) -> dict[str, float | None]:
    total = gpu.memory_total
    allocated = 1.0 if gpu.exclusive else (gpu.used_memory / total if total else 0.0)
    values: dict[str, float | None] = {
        "healthy": 1.0 if gpu.health == "ok" else 0.0,
        "allocated_ratio": allocated,
        "memory_total_bytes": float(total),
    }
    if gpu.emulated:
        values["utilization_ratio"] = allocated
        values["memory_used_bytes"] = float(gpu.used_memory)
    elif reading is not None:
        values["utilization_ratio"] = reading.utilization
        values["memory_used_bytes"] = (
            None if reading.memory_used is None else float(reading.memory_used)
        )
        values["temperature_celsius"] = reading.temperature
        values["power_watts"] = reading.power
    return values


def queue_families(facts: StoreFacts, ctx: RuntimeContext) -> Iterator[Gauge]:
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
    history = ctx.queue_history
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
