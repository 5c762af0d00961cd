"""GPU discovery through NVML (``pynvml``, from nvidia-ml-py).

Every public function opens its own NVML session (``nvmlInit`` ...
``nvmlShutdown``), so callers never hold NVML state between calls and the
library is always shut down, even when a query raises.

The pynvml calls used here, and the C symbols they resolve to, are exactly
what the test stand-in ``tests/kit/fake_nvml/fake_nvml.c`` implements:
nvmlInitWithFlags, nvmlShutdown, nvmlErrorString, nvmlSystemGetDriverVersion,
nvmlSystemGetCudaDriverVersion, nvmlDeviceGetCount_v2,
nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetHandleByUUID, nvmlDeviceGetUUID,
nvmlDeviceGetName, nvmlDeviceGetMemoryInfo, nvmlDeviceGetMigMode and
nvmlDeviceGetComputeRunningProcesses_v3, plus the calls listed in
``gpudock.gpus.nvml_topology`` (topology) and ``gpudock.gpus.nvml_mig`` (MIG
devices, brand, compute capability). Adding a call here means adding the
symbol there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, NamedTuple

import pynvml

from gpudock.core.errors import GpudockError
from gpudock.core.inventory import GpuHealth, GpuInfo, MigDeviceInfo, NodeInventory
from gpudock.gpus.nvml_mig import read_arch, read_brand, read_mig_devices
from gpudock.gpus.nvml_topology import read_topology

log = logging.getLogger("gpudock.gpus")

# Why nvmlInit can fail, as one human hint per NVML return code.
INIT_HINTS: dict[int, str] = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "no NVIDIA driver on this host",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded",
    pynvml.NVML_ERROR_NO_PERMISSION: "no permission to open the NVIDIA device files",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "the NVIDIA kernel driver and user-space library differ; reload the driver or reboot"
    ),
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND: (
        "the installed libnvidia-ml is older than nvidia-ml-py expects"
    ),
}


class NvmlUnavailable(GpudockError):
    """NVML cannot be used on this host; ``reason`` is one human line."""

    status_code = 503

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class GpuQueryFailed(GpudockError):
    """NVML is up, but a query about one GPU failed (unknown UUID, GPU lost)."""

    status_code = 503


class GpuProcess(NamedTuple):
    """A compute process on a GPU; ``used_memory`` is None when NVML cannot tell.
    ``gpu_instance``: the MIG GPU instance it runs in, None when it runs on the GPU
    itself (NVML's 0xFFFFFFFF) or NVML does not say."""

    pid: int
    used_memory: int | None
    gpu_instance: int | None = None


NO_INSTANCE = 0xFFFFFFFF
"""NVML's ``gpuInstanceId`` of a process that runs in no MIG instance."""


def gpu_process(info: Any) -> GpuProcess:
    """A ``GpuProcess`` of one of NVML's ``nvmlProcessInfo_t``."""
    instance = getattr(info, "gpuInstanceId", None)
    used = info.usedGpuMemory
    return GpuProcess(
        int(info.pid),
        None if used is None else int(used),
        None if instance is None or int(instance) == NO_INSTANCE else int(instance),
    )


@contextmanager
def nvml_session() -> Iterator[None]:
    """Initialise NVML for the ``with`` block and always shut it down after.

    Raises ``NvmlUnavailable`` when ``nvmlInit`` fails for any reason (library
    missing, driver not loaded, ...). A failing ``nvmlShutdown`` is logged at
    DEBUG and never raised.
    """
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as err:
        hint = INIT_HINTS.get(err.value, f"nvmlInit returned error code {err.value}")
        raise NvmlUnavailable(f"NVML not available ({err}): {hint}") from err
    try:
        yield
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError as err:
            log.debug("nvmlShutdown failed: %s", err)


def discover_nvml(node_name: str) -> NodeInventory:
    """Return the GPUs NVML reports on this host, with source ``"nvml"``.

    A GPU whose per-device queries fail is reported with health UNHEALTHY (its
    name is ``"unknown"`` and memory 0 when those queries failed); one that
    cannot even be identified by UUID is left out. Either case is named in the
    inventory's ``note`` and logged at WARNING. Each GPU's NUMA node and NVLink
    domain come from ``nvml_topology.read_topology`` (None when unknown; a
    failing topology query is never a problem). The MIG devices of each GPU in
    MIG mode are listed in ``mig_devices`` (``nvml_mig``). Raises ``NvmlUnavailable`` when
    NVML cannot be initialised or cannot count the GPUs. Never changes GPU state.
    """
    problems: list[str] = []
    with nvml_session():
        driver = _optional(pynvml.nvmlSystemGetDriverVersion)
        cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as err:
            raise NvmlUnavailable(f"NVML cannot count the GPUs ({err})") from err
        found = [read for index in range(count) if (read := _read_gpu(index, problems))]
        topology = read_topology({gpu.index: handle for gpu, handle in found})
        migs: list[MigDeviceInfo] = []
        for gpu, handle in found:
            if gpu.mig_mode:
                migs += read_mig_devices(gpu.uuid, handle, problems)
    gpus = [
        replace(gpu, numa=topology[gpu.index].numa, nvlink=topology[gpu.index].nvlink)
        for gpu, _ in found
    ]
    for problem in problems:
        log.warning("%s", problem)
    return NodeInventory(
        name=node_name,
        gpus=tuple(gpus),
        driver_version=driver,
        cuda_version=format_cuda_version(cuda) if cuda else None,
        source="nvml",
        note="; ".join(problems) or None,
        mig_devices=tuple(migs),
    )


def gpu_processes(uuid: str) -> list[GpuProcess]:
    """Return the compute processes on GPU ``uuid`` with their GPU memory in bytes.

    PIDs are as NVML sees them (the host's PID namespace). Raises
    ``NvmlUnavailable`` when NVML cannot start and ``GpuQueryFailed`` when the
    GPU is unknown or cannot be queried. Read-only.
    """
    with nvml_session():
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        except pynvml.NVMLError as err:
            raise GpuQueryFailed(f"cannot list processes on GPU {uuid}: {err}") from err
    return [gpu_process(p) for p in procs]


def format_cuda_version(version: int) -> str:
    """Format NVML's CUDA driver version integer: ``12040`` -> ``"12.4"``."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _read_gpu(index: int, problems: list[str]) -> tuple[GpuInfo, Any] | None:
    """Read GPU ``index`` and return it with its NVML handle, or None when it cannot
    be identified; append one line per failed query to ``problems``."""
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        uuid = str(pynvml.nvmlDeviceGetUUID(handle))
    except pynvml.NVMLError as err:
        problems.append(f"GPU {index} cannot be identified ({err}); left out")
        return None
    failed: list[str] = []
    name = _query(failed, "name", pynvml.nvmlDeviceGetName, handle)
    memory = _query(failed, "memory", pynvml.nvmlDeviceGetMemoryInfo, handle)
    mig_mode = _mig_mode(failed, handle)
    if failed:
        problems.append(f"GPU {index} ({uuid}) unhealthy: {', '.join(failed)}")
    info = GpuInfo(
        index=index,
        uuid=uuid,
        name=str(name) if name is not None else "unknown",
        memory_total=int(memory.total) if memory is not None else 0,
        mig_mode=mig_mode,
        health=GpuHealth.UNHEALTHY if failed else GpuHealth.OK,
        brand=read_brand(handle),
        arch=read_arch(handle),
    )
    return info, handle


def _mig_mode(failed: list[str], handle: Any) -> bool | None:
    """Current MIG mode; None when the GPU does not support MIG or the query failed."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError_NotSupported:
        return None
    except pynvml.NVMLError as err:
        failed.append(f"MIG mode: {err}")
        return None
    return bool(current == pynvml.NVML_DEVICE_MIG_ENABLE)


def _query(failed: list[str], what: str, func: Any, handle: Any) -> Any:
    """``func(handle)``, or None after appending ``"what: error"`` to ``failed``."""
    try:
        return func(handle)
    except pynvml.NVMLError as err:
        failed.append(f"{what}: {err}")
        return None


def _optional(func: Any) -> Any:
    """``func()`` for a system-wide query, or None when it fails (logged at DEBUG)."""
    try:
        return func()
    except pynvml.NVMLError as err:
        log.debug("%s failed: %s", func.__name__, err)
        return None
