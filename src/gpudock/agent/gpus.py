"""The agent's GPUs: inventory, health and readings from NVML, as report entries."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from gpudock.agent.protocol import ReportedGpu
from gpudock.core.inventory import GpuHealth
from gpudock.gpus.nvml import NvmlUnavailable, discover_nvml
from gpudock.gpus.telemetry import read_telemetry

log = logging.getLogger("gpudock.agent")


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """One NVML read: the GPUs (None when NVML is unavailable) and the driver's versions."""

    gpus: list[ReportedGpu] | None
    driver_version: str | None = None
    cuda_version: str | None = None
    note: str | None = None


def read_gpus(node: str) -> NodeGpus:
    """NVML's GPUs of this host with their readings; never raises (NVML missing: None)."""
    try:
        inventory = discover_nvml(node)
        readings = read_telemetry()
    except NvmlUnavailable as err:
        return NodeGpus(None, note=err.reason)
    gpus = []
    for gpu in inventory.gpus:
        reading = readings.get(gpu.uuid)
        gpus.append(
            ReportedGpu(
                uuid=gpu.uuid,
                index=gpu.index,
                name=gpu.name,
                memory_total=gpu.memory_total,
                healthy=gpu.health is GpuHealth.OK,
                numa=gpu.numa,
                nvlink=gpu.nvlink,
                utilization=None if reading is None else reading.utilization,
                memory_used=None if reading is None else reading.memory_used,
                temperature=None if reading is None else reading.temperature,
                power=None if reading is None else reading.power,
            )
        )
    return NodeGpus(gpus, inventory.driver_version, inventory.cuda_version)
