#!/usr/bin/env python3
"""Check gpudock's NVML paths against a real NVIDIA GPU; print one JSON object.

CI has no GPU: there, discovery runs against the C stand-in
``tests/kit/fake_nvml``. This script is the other half: on a machine with a
real GPU and driver it runs the production code (``gpudock.gpus``) and, for
every NVML entry point the stand-in implements, records what the real
library answers (value or NVML error code), so the stand-in's answers can be
compared with the real ones: discovery (MIG mode and MIG devices included),
telemetry, ECC counters, the event set (created, registered, waited on for
0 ms: nothing is changed), brand and compute capability.

With PyTorch it also starts a child that allocates ``--hold-gib`` GiB
(default 2) and checks that ``gpu_processes`` lists it, then runs the node
GPU monitor (the watchdog) in process mode - the child's PID stands for a
job's container - with a ``--limit-gib`` limit (default 1): the watchdog must
kill the child, and the time from its allocation to the kill is recorded.
It needs only ``nvidia-ml-py`` (and PyTorch for the child); it never changes
GPU settings (no MIG, clock, ECC or mode change) and kills only its own child.

Usage: ``PYTHONPATH=src python scripts/gpu_check.py [--hold-gib 2] [--limit-gib 1]``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import pynvml

from gpudock.gpus import discover
from gpudock.gpus.config import GpuNodeConfig
from gpudock.gpus.node_monitor import NodeGpuMonitor
from gpudock.gpus.nvml import gpu_processes, nvml_session
from gpudock.gpus.processes import ContainerOfPid
from gpudock.gpus.telemetry import read_telemetry
from gpudock.gpus.topology import normalise_bus_id
from gpudock.gpus.watchdog import Assignment, Offence

HOLDER = """
import sys, time, torch
x = torch.empty(int(sys.argv[1]) << 30, dtype=torch.uint8, device="cuda")
x.fill_(1); torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(float(sys.argv[2]))
"""


def probe(func: Any, *args: Any) -> Any:
    """``func(*args)`` made JSON-able, or ``{"nvml_error": code, "text": ...}``."""
    try:
        return plain(func(*args))
    except pynvml.NVMLError as err:
        return {"nvml_error": err.value, "text": str(err)}


def plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple, ctypes.Array)):
        return [plain(v) for v in value]
    if hasattr(value, "_fields_"):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def vars_of(value: Any) -> dict[str, Any]:
    return {k: getattr(value, k) for k in value.__slots__}


def raw_probes() -> dict[str, Any]:
    """What the real library answers for each entry point the stand-in implements."""
    out: dict[str, Any] = {}
    with nvml_session():
        out["driver_version"] = probe(pynvml.nvmlSystemGetDriverVersion)
        out["cuda_driver_version"] = probe(pynvml.nvmlSystemGetCudaDriverVersion)
        count = pynvml.nvmlDeviceGetCount()
        out["count"] = count
        gpus = []
        for index in range(count):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            pci = probe(pynvml.nvmlDeviceGetPciInfo, h)
            links = {
                str(link): probe(pynvml.nvmlDeviceGetNvLinkState, h, link)
                for link in range(pynvml.NVML_NVLINK_MAX_LINKS)
            }
            remote = probe(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, h, 0)
            gpus.append(
                {
                    "index": probe(pynvml.nvmlDeviceGetIndex, h),
                    "uuid": plain(uuid),
                    "by_uuid_same_index": pynvml.nvmlDeviceGetIndex(
                        pynvml.nvmlDeviceGetHandleByUUID(uuid)
                    )
                    == index,
                    "name": probe(pynvml.nvmlDeviceGetName, h),
                    "memory": probe(pynvml.nvmlDeviceGetMemoryInfo, h),
                    "memory_v2": probe(pynvml.nvmlDeviceGetMemoryInfo, h, pynvml.nvmlMemory_v2),
                    "mig_mode": probe(pynvml.nvmlDeviceGetMigMode, h),
                    "pci": pci,
                    "pci_bus_normalised": normalise_bus_id(pci["busId"])
                    if isinstance(pci, dict)
                    else None,
                    "nvlink_state": links,
                    "nvlink_remote_0": remote,
                    "memory_affinity": probe(
                        pynvml.nvmlDeviceGetMemoryAffinity, h, 4, pynvml.NVML_AFFINITY_SCOPE_NODE
                    ),
                    "processes": probe(pynvml.nvmlDeviceGetComputeRunningProcesses, h),
                    **health_probes(h),
                    "mig_devices": mig_probes(h),
                }
            )
        out["gpus"] = gpus
        out["event_set"] = event_probe(count)
        out["unknown_uuid"] = probe(pynvml.nvmlDeviceGetHandleByUUID, b"GPU-00000000-0000")
    return out


def health_probes(h: Any) -> dict[str, Any]:
    """Brand, compute capability, telemetry and ECC: what the stand-in answers too."""
    volatile = pynvml.NVML_VOLATILE_ECC
    return {
        "brand": probe(pynvml.nvmlDeviceGetBrand, h),
        "compute_capability": probe(pynvml.nvmlDeviceGetCudaComputeCapability, h),
        "utilization": probe(pynvml.nvmlDeviceGetUtilizationRates, h),
        "temperature": probe(pynvml.nvmlDeviceGetTemperature, h, pynvml.NVML_TEMPERATURE_GPU),
        "power_mw": probe(pynvml.nvmlDeviceGetPowerUsage, h),
        "ecc_corrected": probe(
            pynvml.nvmlDeviceGetTotalEccErrors, h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, volatile
        ),
        "ecc_uncorrected": probe(
            pynvml.nvmlDeviceGetTotalEccErrors,
            h,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            volatile,
        ),
        "supported_event_types": probe(pynvml.nvmlDeviceGetSupportedEventTypes, h),
        "max_mig_devices": probe(pynvml.nvmlDeviceGetMaxMigDeviceCount, h),
    }


def mig_probes(h: Any) -> list[Any]:
    """Each MIG device slot's answers (NOT_FOUND for an empty one); read-only."""
    slots = probe(pynvml.nvmlDeviceGetMaxMigDeviceCount, h)
    if not isinstance(slots, int):
        return []
    found: list[Any] = []
    for slot in range(slots):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, slot)
        except pynvml.NVMLError as err:
            found.append({"slot": slot, "nvml_error": err.value})
            continue
        found.append(
            {
                "slot": slot,
                "uuid": probe(pynvml.nvmlDeviceGetUUID, mig),
                "name": probe(pynvml.nvmlDeviceGetName, mig),
                "memory": probe(pynvml.nvmlDeviceGetMemoryInfo, mig),
                "gpu_instance": probe(pynvml.nvmlDeviceGetGpuInstanceId, mig),
                "compute_instance": probe(pynvml.nvmlDeviceGetComputeInstanceId, mig),
                "is_mig": plain(pynvml.nvmlDeviceIsMigDeviceHandle(mig).value),
                "processes": probe(pynvml.nvmlDeviceGetComputeRunningProcesses, mig),
            }
        )
    return found


def event_probe(count: int) -> dict[str, Any]:
    """Create an event set, register every GPU for XID and ECC events, wait 0 ms, free it."""
    wanted = (
        pynvml.nvmlEventTypeXidCriticalError
        | pynvml.nvmlEventTypeDoubleBitEccError
        | pynvml.nvmlEventTypeSingleBitEccError
    )
    try:
        events = pynvml.nvmlEventSetCreate()
    except pynvml.NVMLError as err:
        return {"create": {"nvml_error": err.value, "text": str(err)}}
    out: dict[str, Any] = {"create": 0, "register": {}}
    for index in range(count):
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        try:
            types = pynvml.nvmlDeviceGetSupportedEventTypes(h) & wanted
            pynvml.nvmlDeviceRegisterEvents(h, types, events)
            out["register"][str(index)] = types
        except pynvml.NVMLError as err:
            out["register"][str(index)] = {"nvml_error": err.value, "text": str(err)}
    out["wait_0ms"] = probe(pynvml.nvmlEventSetWait, events, 0)
    out["free"] = probe(pynvml.nvmlEventSetFree, events)
    return out


class ProcessAsContainer(ContainerOfPid):
    """Process mode (no Docker here): each PID stands for a container of its own."""

    def lookup(self, pid: int) -> str | None:
        return f"pid-{pid}"


def watchdog_check(uuid: str, hold_gib: int, limit_gib: int) -> dict[str, Any]:
    """The watchdog on a real CUDA allocation: a child holds ``hold_gib`` GiB, its job's
    limit is ``limit_gib``; the monitor (as the server runs it) must kill it."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(hold_gib), "60"], stdout=subprocess.PIPE, text=True
    )
    killed: dict[str, Any] = {}
    done = threading.Event()

    class Sink:
        def assignments(self) -> list[Assignment]:
            return [Assignment(1, (uuid,), limit_gib << 30)]

        def job_of_container(self, container_id: str) -> int | None:
            return 1 if container_id == f"pid-{child.pid}" else None

        def over_limit(self, offence: Offence) -> None:
            os.kill(offence.pid, signal.SIGKILL)
            killed.update(at=time.monotonic(), pid=offence.pid, used=offence.used)
            killed["reason"] = offence.reason
            done.set()

        def stray(self, stray: Any, was_killed: bool) -> None:
            killed.setdefault("strays", []).append(stray.pid)

        def gpu_fault(self, fault: Any) -> None:
            killed.setdefault("faults", []).append(fault.summary)

        def sharing(self, mode: Any, mps: Any) -> None:
            killed["sharing"] = str(mode)

    monitor = NodeGpuMonitor(GpuNodeConfig(), Sink(), [uuid], pids=ProcessAsContainer())
    monitor.start()
    try:
        assert child.stdout is not None
        ready = child.stdout.readline().strip() == "ready"
        ready_at = time.monotonic()
        done.wait(timeout=10)
    finally:
        monitor.stop()
        child.kill()
        child.wait()
    return {
        "child_pid": child.pid,
        "child_ready": ready,
        "killed": killed,
        "killed_the_child": killed.get("pid") == child.pid,
        "latency_from_ready_s": round(killed["at"] - ready_at, 3) if "at" in killed else None,
        "watchdog_interval_s": GpuNodeConfig().watchdog.interval,
    }


def process_check(uuid: str, hold_gib: int) -> dict[str, Any]:
    """A child holds ``hold_gib`` GiB on the GPU: does ``gpu_processes`` list it, and with
    how much memory? (NVML reports host PIDs; in a container they may not match.)"""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(hold_gib), "30"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready = child.stdout.readline().strip() == "ready"
        seen = gpu_processes(uuid) if ready else []
        with nvml_session():
            h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            used = int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
        return {
            "child_ready": ready,
            "child_pid": child.pid,
            "listed": [p._asdict() for p in seen],
            "child_pid_listed": any(p.pid == child.pid for p in seen),
            "held_bytes": hold_gib << 30,
            "device_used_bytes": used,
        }
    finally:
        child.kill()
        child.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hold-gib", type=int, default=2)
    parser.add_argument("--limit-gib", type=int, default=1)
    args = parser.parse_args()
    started = time.perf_counter()
    try:
        nvml_py = version("nvidia-ml-py")
    except PackageNotFoundError:
        nvml_py = None
    inventory = discover(os.uname().nodename)
    result: dict[str, Any] = {
        "nvidia_ml_py": nvml_py,
        "inventory": {
            "source": inventory.source,
            "driver_version": inventory.driver_version,
            "cuda_version": inventory.cuda_version,
            "note": inventory.note,
            "gpus": [
                {
                    "index": g.index,
                    "uuid": g.uuid,
                    "name": g.name,
                    "memory_total": g.memory_total,
                    "mig_mode": g.mig_mode,
                    "health": str(g.health),
                    "numa": g.numa,
                    "nvlink": g.nvlink,
                    "brand": g.brand,
                    "arch": g.arch,
                }
                for g in inventory.gpus
            ],
            "mig_devices": [
                {
                    "uuid": m.uuid,
                    "parent": m.parent_uuid,
                    "slot": m.slot,
                    "profile": m.profile,
                    "memory_total": m.memory_total,
                }
                for m in inventory.mig_devices
            ],
        },
    }
    try:
        result["telemetry"] = {u: vars_of(t) for u, t in read_telemetry().items()}
    except Exception as err:  # report, do not hide, what failed
        result["telemetry"] = {"error": repr(err)}
    result["raw"] = raw_probes()
    whole = [g for g in inventory.gpus if not g.mig_mode]  # a CUDA child needs a whole GPU
    if whole and args.hold_gib > 0:
        try:
            result["processes"] = process_check(whole[0].uuid, args.hold_gib)
        except Exception as err:  # report, do not hide, what failed
            result["processes"] = {"error": repr(err)}
        try:
            result["watchdog"] = watchdog_check(whole[0].uuid, args.hold_gib, args.limit_gib)
        except Exception as err:
            result["watchdog"] = {"error": repr(err)}
    result["seconds"] = round(time.perf_counter() - started, 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
