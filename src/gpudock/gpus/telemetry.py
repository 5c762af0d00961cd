"""Live GPU telemetry through NVML: utilisation, memory, temperature, power.

For ``/metrics`` on hosts without dcgm-exporter. One NVML session per call;
a query a GPU does not support (or a symbol the driver lacks) leaves that
field None rather than failing the whole read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from gpudock.gpus.nvml import nvml_session


@dataclass(frozen=True, slots=True)
class GpuTelemetry:
    """One GPU's readings; None where NVML could not say."""

    utilization: float | None = None  # 0..1
    memory_used: int | None = None  # bytes
    temperature: float | None = None  # degrees Celsius
    power: float | None = None  # watts


def read_telemetry() -> dict[str, GpuTelemetry]:
    """Readings of every GPU NVML sees, by UUID.

    Raises ``NvmlUnavailable`` when NVML cannot start; GPUs whose handle
    cannot be read are left out. Read-only.
    """
    found: dict[str, GpuTelemetry] = {}
    with nvml_session():
        for index in range(_try(pynvml.nvmlDeviceGetCount) or 0):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                uuid = str(pynvml.nvmlDeviceGetUUID(handle))
            except pynvml.NVMLError:
                continue
            found[uuid] = _read(handle)
    return found


def _read(handle: Any) -> GpuTelemetry:
    rates = _try(pynvml.nvmlDeviceGetUtilizationRates, handle)
    memory = _try(pynvml.nvmlDeviceGetMemoryInfo, handle)
    temperature = _try(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    milliwatts = _try(pynvml.nvmlDeviceGetPowerUsage, handle)
    return GpuTelemetry(
        utilization=None if rates is None else float(rates.gpu) / 100,
        memory_used=None if memory is None else int(memory.used),
        temperature=None if temperature is None else float(temperature),
        power=None if milliwatts is None else float(milliwatts) / 1000,
    )


def _try(func: Any, *args: Any) -> Any:
    try:
        return func(*args)
    except pynvml.NVMLError:
        return None
