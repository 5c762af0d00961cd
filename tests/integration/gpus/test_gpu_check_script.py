"""``scripts/gpu_check.py`` against the C stand-in: the same JSON it prints on a real GPU.

On a real GPU the script's answers are compared with the stand-in's by hand
(docs/operations.md); here it must run end to end and report what the
stand-in holds, so that it still works when a machine with a GPU is at hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.kit.fake_nvml import GIB, REPO_SRC, STATE_ENV, FakeNvml, fake_gpu, fake_mig

SCRIPT = REPO_SRC.parent / "scripts" / "gpu_check.py"


def run_check(fake: FakeNvml) -> dict[str, Any]:
    fake.write()
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(fake.lib_dir),
        STATE_ENV: str(fake.state_path),
        "PYTHONPATH": str(REPO_SRC),
    }
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--hold-gib", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_reports_discovery_and_each_raw_answer(fake_nvml: FakeNvml) -> None:
    mig = fake_mig(0, 0, "7g.141gb", 140 * GIB)
    fake_nvml.state["gpus"] = [
        fake_gpu(0, name="NVIDIA H200", memory_total=140 * GIB, mig={"current": 1, "pending": 1},
                 mig_devices=[mig], ecc={"corrected": 2, "uncorrected": 0}),
        fake_gpu(1, name="Tesla T4", memory_total=15 * GIB, mig="unsupported", brand=2, arch=[7, 5],
                 events=False),
    ]  # fmt: skip

    report = run_check(fake_nvml)

    inventory = report["inventory"]
    assert inventory["source"] == "nvml"
    assert [(g["name"], g["memory_total"]) for g in inventory["gpus"]] == [
        ("NVIDIA H200", 140 * GIB),
        ("Tesla T4", 15 * GIB),
    ]
    raw = report["raw"]
    assert raw["count"] == 2
    h200, t4 = raw["gpus"]
    assert h200["uuid"] == inventory["gpus"][0]["uuid"]
    assert h200["by_uuid_same_index"] is True
    assert h200["memory"]["total"] == 140 * GIB
    assert h200["mig_mode"] == [1, 1]
    assert [m["profile"] for m in inventory["mig_devices"]] == ["7g.141gb"]
    assert h200["mig_devices"][0]["name"] == "NVIDIA H200 MIG 7g.141gb"
    assert h200["mig_devices"][1] == {"slot": 1, "nvml_error": 6}  # an empty slot
    assert (h200["ecc_corrected"], h200["ecc_uncorrected"]) == (2, 0)
    assert (t4["brand"], t4["compute_capability"]) == (2, [7, 5])
    events = raw["event_set"]
    assert events["register"]["0"] == 0xB  # XID and both ECC kinds
    assert events["register"]["1"]["nvml_error"] == 3  # this GPU takes no events: polled
    assert events["wait_0ms"]["nvml_error"] == 10  # nothing happened: a timeout
    assert report["telemetry"][h200["uuid"]]["memory_used"] == 0
    assert t4["mig_mode"]["nvml_error"] == 3  # Not Supported
    assert raw["unknown_uuid"]["nvml_error"] == 6  # Not Found
    assert "processes" not in report and "watchdog" not in report  # --hold-gib 0: no child
