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

from tests.kit.fake_nvml import STATE_ENV, FakeNvml, fake_gpu, render_state

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
