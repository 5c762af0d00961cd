#!/usr/bin/env python3
"""Check gpudock's NVML paths against a real NVIDIA GPU; print one JSON object.

CI has no GPU: there, discovery runs against the C stand-in
``tests/kit/fake_nvml``. This script is the other half: on a machine with a
real GPU and driver it runs the production code (``gpudock.gpus``) and, for
every NVML entry point the stand-in implements, records what the real
library answers (value or NVML error code), so the stand-in's answers can be
compared with the real ones. It needs only ``nvidia-ml-py`` (and, for the
process check, PyTorch); it never changes GPU state beyond one short-lived
CUDA allocation by a child process.

Usage: ``PYTHONPATH=src python scripts/gpu_check.py [--hold-gib 8]``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import pynvml

from gpudock.gpus import discover
from gpudock.gpus.nvml import gpu_processes, nvml_session
from gpudock.gpus.topology import normalise_bus_id

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
                }
            )
        out["gpus"] = gpus
        out["unknown_uuid"] = probe(pynvml.nvmlDeviceGetHandleByUUID, b"GPU-00000000-0000")
    return out


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
    parser.add_argument("--hold-gib", type=int, default=8)
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
                }
                for g in inventory.gpus
            ],
        },
    }
    result["raw"] = raw_probes()
    if inventory.gpus and args.hold_gib > 0:
        try:
            result["processes"] = process_check(inventory.gpus[0].uuid, args.hold_gib)
        except Exception as err:  # report, do not hide, what failed
            result["processes"] = {"error": repr(err)}
    result["seconds"] = round(time.perf_counter() - started, 2)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
