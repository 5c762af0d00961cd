"""GPU discovery: NVML on real hosts, an emulator for demos and CPU-only hosts.

::

    discover(node, emulate)
        |-- emulate given --> emulated_inventory(node, spec)   source="emulated"
        '-- else ----------> discover_nvml(node)               source="nvml"
                               |   (+ NUMA node, NVLink domain per GPU)
                               '-- NvmlUnavailable --> 0 GPUs, source="none",
                                                       note=reason, one WARNING
    apply_declared_topology(inventory, nvlink, numa)     the config's node.topology wins
"""

from __future__ import annotations

import logging

from gpudock.core.inventory import NodeInventory
from gpudock.gpus.emulated import (
    EmulatedGpus,
    emulated_gpu_uuid,
    emulated_inventory,
    parse_emulation_spec,
)
from gpudock.gpus.nvml import (
    GpuProcess,
    GpuQueryFailed,
    NvmlUnavailable,
    discover_nvml,
    format_cuda_version,
    gpu_processes,
    nvml_session,
)
from gpudock.gpus.topology import apply_declared_topology

__all__ = [
    "EmulatedGpus",
    "GpuProcess",
    "GpuQueryFailed",
    "NvmlUnavailable",
    "apply_declared_topology",
    "discover",
    "discover_nvml",
    "emulated_gpu_uuid",
    "emulated_inventory",
    "format_cuda_version",
    "gpu_processes",
    "nvml_session",
    "parse_emulation_spec",
]

log = logging.getLogger("gpudock.gpus")


def discover(node_name: str, emulate: str | None = None) -> NodeInventory:
    """Return this host's GPU inventory.

    With ``emulate`` (a spec such as ``4xH100-80GB``; only ``None`` means "not
    given") the GPUs are emulated and a bad spec raises ``ValueError``.
    Otherwise NVML is asked; when NVML is unavailable this logs exactly one
    WARNING line on logger ``gpudock.gpus`` and returns zero GPUs with
    ``source="none"`` and the reason as ``note``. It never raises
    ``NvmlUnavailable`` and never changes GPU state.
    """
    if emulate is not None:
        return emulated_inventory(node_name, emulate)
    try:
        return discover_nvml(node_name)
    except NvmlUnavailable as err:
        log.warning("no GPUs discovered on %s: %s", node_name, err.reason)
        return NodeInventory(name=node_name, gpus=(), source="none", note=err.reason)
