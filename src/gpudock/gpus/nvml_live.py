"""A long-lived NVML session for the node's GPU monitor.

Discovery opens and closes NVML per call (``nvml.py``); the watchdog asks
every half second, so it holds one session (``nvmlInit`` once, NVML counts
them) and caches each GPU's handle. Threads may share one ``NvmlLive``: NVML
is thread-safe.

NVML symbols used beyond discovery's (and its MIG walk, ``nvml_mig.py``):
nvmlDeviceGetTotalEccErrors, nvmlEventSetCreate, nvmlDeviceGetSupportedEventTypes,
nvmlDeviceRegisterEvents, nvmlEventSetWait_v2, nvmlEventSetFree.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, NamedTuple

import pynvml

from gpudock.gpus.nvml import (
    INIT_HINTS,
    GpuProcess,
    GpuQueryFailed,
    NvmlUnavailable,
    gpu_process,
)
from gpudock.gpus.nvml_mig import read_mig_devices

log = logging.getLogger("gpudock.gpus")

EVENT_TYPES = (
    pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypeSingleBitEccError
)


class GpuEvent(NamedTuple):
    """One NVML event: the GPU, its type bit and its data (the XID for XID events)."""

    gpu_uuid: str
    event_type: int
    data: int


class NvmlLive:
    """``open()`` once, query many times, ``close()`` once."""

    def __init__(self) -> None:
        self._handles: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._open = False

    def open(self) -> None:
        """Initialise NVML; ``NvmlUnavailable`` (with a hint) when it cannot start."""
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            hint = INIT_HINTS.get(err.value, f"nvmlInit returned error code {err.value}")
            raise NvmlUnavailable(f"NVML not available ({err}): {hint}") from err
        self._open = True

    def close(self) -> None:
        if self._open:
            self._open = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as err:
                log.debug("nvmlShutdown failed: %s", err)

    def handle(self, uuid: str) -> Any:
        """The GPU's handle (cached); ``GpuQueryFailed`` when NVML does not know it."""
        with self._lock:
            found = self._handles.get(uuid)
        if found is not None:
            return found
        try:
            found = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except pynvml.NVMLError as err:
            raise GpuQueryFailed(f"GPU {uuid}: {err}") from err
        with self._lock:
            self._handles[uuid] = found
        return found

    def processes(self, uuid: str) -> list[GpuProcess]:
        """The compute processes on GPU ``uuid`` (host PIDs); ``GpuQueryFailed`` when
        the query fails (the GPU is lost, say)."""
        try:
            procs = pynvml.nvmlDeviceGetComputeRunningProcesses(self.handle(uuid))
        except pynvml.NVMLError as err:
            raise GpuQueryFailed(f"GPU {uuid}: {err}") from err
        return [gpu_process(p) for p in procs]

    def mig_instances(self, uuid: str) -> dict[int, str]:
        """The MIG devices of GPU ``uuid`` by GPU instance id (empty when MIG is off or
        they cannot be read): where a process in an instance runs."""
        problems: list[str] = []
        try:
            found = read_mig_devices(uuid, self.handle(uuid), problems)
        except GpuQueryFailed:
            return {}
        for problem in problems:
            log.debug("%s", problem)
        return {m.gpu_instance: m.uuid for m in found if m.gpu_instance is not None}

    def ecc_errors(self, uuid: str) -> tuple[int, int] | None:
        """Volatile (since the last reset) ``(corrected, uncorrected)`` ECC error counts,
        or None when the GPU does not count them."""
        handle = self.handle(uuid)
        try:
            return (
                int(
                    pynvml.nvmlDeviceGetTotalEccErrors(
                        handle, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC
                    )
                ),
                int(
                    pynvml.nvmlDeviceGetTotalEccErrors(
                        handle, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
                    )
                ),
            )
        except pynvml.NVMLError_NotSupported:
            return None
        except pynvml.NVMLError as err:
            raise GpuQueryFailed(f"GPU {uuid}: {err}") from err

    def alive(self, uuid: str) -> str | None:
        """None when the GPU answers a query, else NVML's error (``GPU is lost``)."""
        try:
            pynvml.nvmlDeviceGetMemoryInfo(self.handle(uuid))
        except (pynvml.NVMLError, GpuQueryFailed) as err:
            return str(err)
        return None

    def event_set(self, uuids: list[str]) -> tuple[Any, list[str]]:
        """An event set with XID and ECC events of every GPU that supports them.

        Returns the set (None when NVML has no event sets) and the GPUs that
        could not be registered (they are polled instead).
        """
        try:
            events = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as err:
            log.info("NVML event sets unavailable (%s); GPU health is polled", err)
            return None, list(uuids)
        unregistered = []
        for uuid in uuids:
            try:
                handle = self.handle(uuid)
                wanted = pynvml.nvmlDeviceGetSupportedEventTypes(handle) & EVENT_TYPES
                if not wanted:
                    raise GpuQueryFailed("no XID or ECC events")
                pynvml.nvmlDeviceRegisterEvents(handle, wanted, events)
            except (pynvml.NVMLError, GpuQueryFailed) as err:
                log.info("GPU %s: no NVML events (%s); its health is polled", uuid, err)
                unregistered.append(uuid)
        return events, unregistered

    def wait(self, events: Any, timeout_ms: int) -> GpuEvent | None:
        """The next event of ``events``, or None after ``timeout_ms`` without one."""
        try:
            data = pynvml.nvmlEventSetWait(events, timeout_ms)
        except pynvml.NVMLError_Timeout:
            return None
        uuid = str(pynvml.nvmlDeviceGetUUID(data.device))
        return GpuEvent(uuid, int(data.eventType), int(data.eventData))

    @staticmethod
    def free(events: Any) -> None:
        try:
            pynvml.nvmlEventSetFree(events)
        except pynvml.NVMLError as err:
            log.debug("nvmlEventSetFree failed: %s", err)
