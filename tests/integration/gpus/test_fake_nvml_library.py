"""Contract checks of the C stand-in itself, at the ctypes level.

They pin the NVML behaviour that pynvml's happy paths do not reach (return
codes for misuse, re-reading state on every init). The library is loaded in a
subprocess so that this pytest process never maps a ``libnvidia-ml.so.1``
that a later in-process ``pynvml.nvmlInit`` would pick up by soname.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from tests.kit.fake_nvml import (
    GIB,
    STATE_ENV,
    FakeNvml,
    add_event,
    fake_gpu,
    fake_mig,
    render_state,
)

_PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
state_path, next_state = sys.argv[2], sys.argv[3]
count, handle = ctypes.c_uint(), ctypes.c_void_p()
out = {"count_before_init": lib.nvmlDeviceGetCount_v2(ctypes.byref(count))}
out["init"] = lib.nvmlInitWithFlags(0)
lib.nvmlDeviceGetCount_v2(ctypes.byref(count)); out["count"] = count.value
out["bad_index"] = lib.nvmlDeviceGetHandleByIndex_v2(99, ctypes.byref(handle))
out["handle"] = lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle))
name = ctypes.create_string_buffer(96)
out["bad_handle_name"] = lib.nvmlDeviceGetName(ctypes.c_void_p(8), name, 96)
out["tiny_name_buffer"] = lib.nvmlDeviceGetName(handle, name, 4)
mem_v2 = (ctypes.c_ulonglong * 5)()  # version field (zeroed) + four counters
out["memory_v2_bad_version"] = lib.nvmlDeviceGetMemoryInfo_v2(handle, mem_v2)
open(state_path, "w").write(next_state)
out["reinit"] = lib.nvmlInitWithFlags(0)
lib.nvmlDeviceGetCount_v2(ctypes.byref(count)); out["count_after_reinit"] = count.value
out["shutdowns"] = [lib.nvmlShutdown(), lib.nvmlShutdown(), lib.nvmlShutdown()]
print(json.dumps(out))
"""


def _probe(fake: FakeNvml, next_state: dict[str, Any]) -> dict[str, Any]:
    fake.write()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _PROBE,
            str(fake.lib_dir / "libnvidia-ml.so.1"),
            str(fake.state_path),
            render_state(next_state),
        ],
        env={STATE_ENV: str(fake.state_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_return_codes_and_state_reread_on_init(fake_nvml: FakeNvml) -> None:
    next_state = {**fake_nvml.state, "gpus": [*fake_nvml.state["gpus"], fake_gpu(2)]}

    result = _probe(fake_nvml, next_state)

    assert result == {
        "count_before_init": 1,  # NVML_ERROR_UNINITIALIZED
        "init": 0,
        "count": 2,
        "bad_index": 2,  # NVML_ERROR_INVALID_ARGUMENT
        "handle": 0,
        "bad_handle_name": 2,
        "tiny_name_buffer": 7,  # NVML_ERROR_INSUFFICIENT_SIZE
        "memory_v2_bad_version": 25,  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        "reinit": 0,
        "count_after_reinit": 3,  # the state file was re-read by the second init
        "shutdowns": [0, 0, 1],  # refcounted: two inits, then UNINITIALIZED
    }


_TOPOLOGY_PROBE = r"""
import ctypes, json, sys

class PciInfo(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint),
                ("bus", ctypes.c_uint), ("device", ctypes.c_uint),
                ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]

lib = ctypes.CDLL(sys.argv[1])
lib.nvmlInitWithFlags(0)
linked, plain = ctypes.c_void_p(), ctypes.c_void_p()
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(linked))
lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(plain))
active, pci = ctypes.c_uint(7), PciInfo()
mask = (ctypes.c_ulonglong * 2)()
out = {
    "pci": lib.nvmlDeviceGetPciInfo_v3(plain, ctypes.byref(pci)),
    "bus_id": pci.busId.decode(), "legacy": pci.busIdLegacy.decode(),
    "numbers": [pci.domain, pci.bus, pci.device],
    "state_link0": lib.nvmlDeviceGetNvLinkState(linked, 0, ctypes.byref(active)),
    "active0": active.value,
    "state_link1": lib.nvmlDeviceGetNvLinkState(linked, 1, ctypes.byref(active)),
    "active1": active.value,
    "state_past_last": lib.nvmlDeviceGetNvLinkState(linked, 2, ctypes.byref(active)),
    "state_no_nvlink": lib.nvmlDeviceGetNvLinkState(plain, 0, ctypes.byref(active)),
    "remote": lib.nvmlDeviceGetNvLinkRemotePciInfo_v2(linked, 0, ctypes.byref(pci)),
    "remote_bus_id": pci.busId.decode(),
    "affinity": lib.nvmlDeviceGetMemoryAffinity(linked, 2, mask, 0),
    "mask": [mask[0], mask[1]],
    "affinity_bad_scope": lib.nvmlDeviceGetMemoryAffinity(linked, 2, mask, 2),
    "affinity_too_small": lib.nvmlDeviceGetMemoryAffinity(plain, 1, mask, 0),
    "affinity_unknown": lib.nvmlDeviceGetMemoryAffinity(linked, 2, None, 0),
    "exports_numa_node_id": hasattr(lib, "nvmlDeviceGetNumaNodeId"),
}
print(json.dumps(out))
"""


def test_topology_entry_points_follow_nvml(fake_nvml: FakeNvml) -> None:
    fake_nvml.state["gpus"] = [
        fake_gpu(0, numa_node=1, nvlink_peers=["00000000:C1:00.0", None]),
        fake_gpu(1, pci_bus_id="00000000:18:00.0", numa_node=64),
    ]
    fake_nvml.write()

    done = subprocess.run(
        [sys.executable, "-c", _TOPOLOGY_PROBE, str(fake_nvml.lib_dir / "libnvidia-ml.so.1")],
        env={STATE_ENV: str(fake_nvml.state_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )

    assert json.loads(done.stdout) == {
        "pci": 0,
        "bus_id": "00000000:18:00.0",
        "legacy": "0000:18:00.0",
        "numbers": [0, 0x18, 0],
        "state_link0": 0,
        "active0": 1,
        "state_link1": 0,
        "active1": 0,  # a link that is down
        "state_past_last": 2,  # NVML_ERROR_INVALID_ARGUMENT: no such link
        "state_no_nvlink": 3,  # NVML_ERROR_NOT_SUPPORTED: a PCIe-only GPU
        "remote": 0,
        "remote_bus_id": "00000000:C1:00.0",
        "affinity": 0,
        "mask": [0b10, 0],  # NUMA node 1
        "affinity_bad_scope": 2,
        "affinity_too_small": 7,  # node 64 needs a second 64-bit word
        "affinity_unknown": 2,  # no output buffer
        "exports_numa_node_id": False,  # gpudock does not call it (see nvml_topology)
    }


_MIG_EVENT_PROBE = r"""
import ctypes, json, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.nvmlInitWithFlags(0)
mig_gpu, plain, mig, parent = (ctypes.c_void_p() for _ in range(4))
lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(mig_gpu))
lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(plain))
count, flag, value = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_ulonglong()
out = {
    "max_migs": [lib.nvmlDeviceGetMaxMigDeviceCount(mig_gpu, ctypes.byref(count)), count.value],
    "slot0": lib.nvmlDeviceGetMigDeviceHandleByIndex(mig_gpu, 0, ctypes.byref(mig)),
    "slot1_empty": lib.nvmlDeviceGetMigDeviceHandleByIndex(mig_gpu, 1, ctypes.byref(parent)),
    "slot7": lib.nvmlDeviceGetMigDeviceHandleByIndex(mig_gpu, 7, ctypes.byref(parent)),
    "mig_off": lib.nvmlDeviceGetMigDeviceHandleByIndex(plain, 0, ctypes.byref(parent)),
    "parent": lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, ctypes.byref(parent)),
    "parent_is_gpu": parent.value == mig_gpu.value,
    "is_mig": [lib.nvmlDeviceIsMigDeviceHandle(mig, ctypes.byref(flag)), flag.value],
    "pci_of_mig": lib.nvmlDeviceGetPciInfo_v3(mig, ctypes.create_string_buffer(128)),
    "ecc_unsupported": lib.nvmlDeviceGetTotalEccErrors(plain, 1, 0, ctypes.byref(value)),
}
events = ctypes.c_void_p()
lib.nvmlEventSetCreate(ctypes.byref(events))
out["register_events_off"] = lib.nvmlDeviceRegisterEvents(plain, 8, events)
out["register"] = lib.nvmlDeviceRegisterEvents(mig_gpu, 8, events)
data = (ctypes.c_ubyte * 64)()
started = time.monotonic()
out["wait_nothing"] = lib.nvmlEventSetWait_v2(events, data, 50)
out["waited_ms_at_least_50"] = (time.monotonic() - started) * 1000 >= 50
open(sys.argv[2] + ".new", "w").write(sys.argv[3])
import os; os.replace(sys.argv[2] + ".new", sys.argv[2])
out["wait_event"] = lib.nvmlEventSetWait_v2(events, data, 1000)
out["event_data"] = int.from_bytes(bytes(data[16:24]), "little")
out["free"] = lib.nvmlEventSetFree(events)
print(json.dumps(out))
"""


def test_mig_ecc_and_event_entry_points_follow_nvml(fake_nvml: FakeNvml) -> None:
    fake_nvml.state["gpus"] = [
        fake_gpu(
            0, mig={"current": 1, "pending": 1}, mig_devices=[fake_mig(0, 0, "7g.80gb", 80 * GIB)]
        ),
        fake_gpu(1, events=False),
    ]
    fake_nvml.write()
    later = {**fake_nvml.state}
    add_event(later, 0, "xid", 79)

    done = subprocess.run(
        [sys.executable, "-c", _MIG_EVENT_PROBE, str(fake_nvml.lib_dir / "libnvidia-ml.so.1"),
         str(fake_nvml.state_path), render_state(later)],
        env={STATE_ENV: str(fake_nvml.state_path)},
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip

    assert json.loads(done.stdout) == {
        "max_migs": [0, 7],
        "slot0": 0,
        "slot1_empty": 6,  # NVML_ERROR_NOT_FOUND
        "slot7": 2,  # past the GPU's MIG slots
        "mig_off": 6,
        "parent": 0,
        "parent_is_gpu": True,
        "is_mig": [0, 1],
        "pci_of_mig": 3,  # a GPU-wide query: NOT_SUPPORTED on a MIG device
        "ecc_unsupported": 3,
        "register_events_off": 3,
        "register": 0,
        "wait_nothing": 10,  # NVML_ERROR_TIMEOUT
        "waited_ms_at_least_50": True,
        "wait_event": 0,  # the replaced state file is read while waiting
        "event_data": 79,
        "free": 0,
    }
