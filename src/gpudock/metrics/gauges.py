"""Prometheus gauge families in the text format, and the ``gpu_*`` families built with them.

Light on purpose (no store, no runtime): the server's ``/metrics``
(``collector.py``) and the node agent's (``agent/metrics.py``) both write
their ``gpu_*`` families with ``gpu_families``, so the two agree on every
family and label.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from gpudock.gpus.telemetry import GpuTelemetry

GPU_LABELS = ("node", "gpu", "uuid", "model", "emulated")
ALLOCATION_LABELS = ("node", "gpu", "uuid", "model", "job", "user", "queue", "kind")
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4  # what the expositions write


@dataclass(frozen=True, slots=True)
class GpuFacts:
    uuid: str
    node: str
    index: int
    name: str
    memory_total: int
    emulated: bool
    health: str
    used_memory: int
    exclusive: bool


@dataclass(frozen=True, slots=True)
class HeldGpu:
    """One GPU (or share of one) held by a job that holds resources."""

    gpu_uuid: str
    job_id: int
    user: str
    queue: str
    shared: bool


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


def gpu_families(
    gpus: Sequence[GpuFacts], held: Sequence[HeldGpu], readings: Mapping[str, GpuTelemetry]
) -> Iterator[Gauge]:
    """Allocation info, health and telemetry per GPU.

    Emulated GPUs (``emulated="true"``) report the store's view: memory in use
    is what jobs reserved and utilisation is the allocated fraction; they
    have no temperature or power. Real GPUs report NVML's readings, when
    NVML answered on this node (or, on a Swarm, when its agent reported).
    The node agent serves its own node's families with this very function.
    """
    by_uuid = {g.uuid: g for g in gpus}
    info = Gauge(
        "gpudock_gpu_allocation_info",
        "1 for each GPU (or share of one) held by a job; uuid joins dcgm-exporter's UUID.",
        ALLOCATION_LABELS,
    )
    for one in held:
        gpu = by_uuid.get(one.gpu_uuid)
        if gpu is None:
            continue
        kind = "shared" if one.shared else "exclusive"
        where = (gpu.node, str(gpu.index), gpu.uuid, model_of(gpu.name))
        info.add(info.labels(*where, str(one.job_id), one.user, one.queue, kind), 1)
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
    for gpu in gpus:
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
