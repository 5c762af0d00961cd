"""MIG devices, brand and compute capability of the GPUs NVML reports.

Called by ``discover_nvml`` inside its NVML session. A MIG device is found by
walking ``nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0..max-1)`` of a GPU whose
*current* MIG mode is on (an empty slot answers NOT_FOUND). Its profile is
the tail of its name (``NVIDIA A100-SXM4-40GB MIG 1g.5gb``), as ``nvidia-smi
-L`` prints it. Every query may fail: a device that cannot be identified is
left out and named in ``problems``; a GPU's brand or compute capability that
cannot be read is None.

NVML symbols used: nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex,
nvmlDeviceGetUUID, nvmlDeviceGetName, nvmlDeviceGetMemoryInfo, nvmlDeviceGetGpuInstanceId,
nvmlDeviceGetComputeInstanceId, nvmlDeviceGetBrand, nvmlDeviceGetCudaComputeCapability.
"""

from __future__ import annotations

import re
from typing import Any

import pynvml

from gpudock.core.inventory import MigDeviceInfo

# libnvidia-container's brand names, indexed by nvmlBrandType_t (what brand= constraints use).
BRANDS = (
    "unknown", "quadro", "tesla", "nvs", "grid", "geforce", "titan", "vapps", "vpc", "vcs",
    "vws", "cloudgaming", "quadrortx", "nvidiartx", "nvidia", "geforcertx", "titanrtx",
)  # fmt: skip
_PROFILE_RE = re.compile(r"\bMIG\s+(\S+)\s*$")


def read_mig_devices(parent_uuid: str, handle: Any, problems: list[str]) -> list[MigDeviceInfo]:
    """The MIG devices of the GPU ``handle`` (MIG mode on), in slot order."""
    try:
        slots = int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))
    except pynvml.NVMLError as err:
        problems.append(f"GPU {parent_uuid}: cannot count its MIG devices ({err})")
        return []
    found = []
    for slot in range(slots):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except pynvml.NVMLError_NotFound:
            continue
        except pynvml.NVMLError as err:
            problems.append(f"GPU {parent_uuid}: MIG slot {slot} cannot be read ({err})")
            continue
        device = _read_one(parent_uuid, slot, mig, problems)
        if device is not None:
            found.append(device)
    return found


def _read_one(parent_uuid: str, slot: int, mig: Any, problems: list[str]) -> MigDeviceInfo | None:
    try:
        uuid = str(pynvml.nvmlDeviceGetUUID(mig))
        name = str(pynvml.nvmlDeviceGetName(mig))
        memory = int(pynvml.nvmlDeviceGetMemoryInfo(mig).total)
    except pynvml.NVMLError as err:
        problems.append(f"GPU {parent_uuid}: MIG device in slot {slot} left out ({err})")
        return None
    match = _PROFILE_RE.search(name)
    if match is None:
        problems.append(f"GPU {parent_uuid}: MIG device {uuid} has no profile in {name!r}")
        return None
    return MigDeviceInfo(
        uuid=uuid,
        parent_uuid=parent_uuid,
        slot=slot,
        profile=match[1],
        memory_total=memory,
        gpu_instance=_optional_int(pynvml.nvmlDeviceGetGpuInstanceId, mig),
        compute_instance=_optional_int(pynvml.nvmlDeviceGetComputeInstanceId, mig),
    )


def read_brand(handle: Any) -> str | None:
    """The toolkit's brand name of the GPU (``tesla``, ``nvidia``...), or None."""
    value = _optional_int(pynvml.nvmlDeviceGetBrand, handle)
    if value is None:
        return None
    return BRANDS[value] if 0 <= value < len(BRANDS) else "unknown"


def read_arch(handle: Any) -> str | None:
    """The CUDA compute capability as ``major.minor`` (``9.0`` for an H100), or None."""
    try:
        major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    except pynvml.NVMLError:
        return None
    return f"{int(major)}.{int(minor)}"


def _optional_int(func: Any, handle: Any) -> int | None:
    try:
        return int(func(handle))
    except pynvml.NVMLError:
        return None
