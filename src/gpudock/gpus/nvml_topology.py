"""NUMA nodes and NVLink domains of the GPUs NVML reports.

Called by ``discover_nvml`` inside its NVML session. Every NVML call here may
fail (NotSupported on GPUs without NVLink, FunctionNotFound on old drivers,
GPU is lost, ...): a failure means "unknown" or "no link", never an error.

* **NUMA node**: the host NUMA node nearest the GPU, as ``nvidia-smi topo -m``
  shows it: ``nvmlDeviceGetMemoryAffinity`` (scope NODE) when it names exactly
  one node, else the kernel's ``/sys/bus/pci/devices/<bus id>/numa_node``.
  ``nvmlDeviceGetNumaNodeId`` is deliberately not used: it only applies where
  the GPU's own memory is a NUMA node (e.g. Grace Hopper) and then names that
  node, not the CPU side's.
* **NVLink domain**: for each link ``0..NVML_NVLINK_MAX_LINKS-1`` that
  ``nvmlDeviceGetNvLinkState`` reports active, the peer's PCI bus id from
  ``nvmlDeviceGetNvLinkRemotePciInfo`` (symbol ``..._v2``); domains are the
  connected components (``topology.nvlink_domains``), so GPUs wired through
  NVSwitches share one domain.

NVML symbols used: nvmlDeviceGetPciInfo_v3, nvmlDeviceGetMemoryAffinity,
nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkRemotePciInfo_v2.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import pynvml

from gpudock.gpus.topology import (
    SYSFS_PCI_DEVICES,
    normalise_bus_id,
    numa_from_sysfs,
    nvlink_domains,
)

log = logging.getLogger("gpudock.gpus")

# One 64-bit word of the node mask covers NUMA nodes 0..63.
_NODE_SET_WORDS = 4
# Errors after which no further link of a GPU can answer.
_GIVE_UP = (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_GPU_IS_LOST)


class GpuTopology(NamedTuple):
    numa: int | None
    nvlink: int | None


def read_topology(
    handles: Mapping[int, Any], sysfs: Path = SYSFS_PCI_DEVICES
) -> dict[int, GpuTopology]:
    """NUMA node and NVLink domain of each GPU in ``handles`` (index -> NVML handle).

    Must run inside an NVML session. Every index of ``handles`` is in the
    result; what cannot be learnt is None. Never raises an NVML error.
    """
    bus_ids = {index: _bus_id(handle) for index, handle in handles.items()}
    links = [
        (bus, peer)
        for index, bus in bus_ids.items()
        if bus is not None
        for peer in _nvlink_peers(handles[index])
    ]
    known = {index: bus for index, bus in bus_ids.items() if bus is not None}
    domains = nvlink_domains(known, links)
    return {
        index: GpuTopology(
            numa=_numa_node(handle, bus_ids[index], sysfs), nvlink=domains.get(index)
        )
        for index, handle in handles.items()
    }


def _bus_id(handle: Any) -> str | None:
    """The GPU's own PCI bus id in sysfs form, or None when NVML cannot tell."""
    try:
        return _pci_bus_id(pynvml.nvmlDeviceGetPciInfo(handle))
    except pynvml.NVMLError as err:
        log.debug("PCI info unavailable: %s", err)
        return None


def _pci_bus_id(info: Any) -> str | None:
    """Bus id of an ``nvmlPciInfo_t``: ``busId``, else ``busIdLegacy``, else its numbers."""
    for text in (info.busId, info.busIdLegacy):
        if bus := normalise_bus_id(text):
            return bus
    if info.bus or info.device or info.domain:
        return f"{info.domain:04x}:{info.bus:02x}:{info.device:02x}.0"
    return None


def _nvlink_peers(handle: Any) -> Iterator[str]:
    """Bus ids at the far end of each active NVLink of the GPU (GPUs or NVSwitches)."""
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if not pynvml.nvmlDeviceGetNvLinkState(handle, link):
                continue
            remote = _pci_bus_id(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link))
        except pynvml.NVMLError as err:  # NotSupported: no NVLink; InvalidArgument: no such link
            if err.value in _GIVE_UP:
                return
            continue
        if remote is not None:
            yield remote


def _numa_node(handle: Any, bus_id: str | None, sysfs: Path) -> int | None:
    """The host NUMA node nearest the GPU (NVML memory affinity, else sysfs); None if unknown."""
    try:
        mask = pynvml.nvmlDeviceGetMemoryAffinity(
            handle, _NODE_SET_WORDS, pynvml.NVML_AFFINITY_SCOPE_NODE
        )
    except pynvml.NVMLError as err:
        log.debug("memory affinity unavailable: %s", err)
    else:
        nodes = [
            word * 64 + bit
            for word, bits in enumerate(mask)
            for bit in range(64)
            if int(bits) >> bit & 1
        ]
        if len(nodes) == 1:
            return nodes[0]
    return numa_from_sysfs(bus_id, sysfs) if bus_id is not None else None
