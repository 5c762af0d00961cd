"""``read_telemetry`` reads utilisation, memory, temperature and power through real pynvml."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from tests.kit.fake_nvml import REPO_SRC, STATE_ENV, FakeNvml

CODE = """
import dataclasses, json
from gpudock.gpus.telemetry import read_telemetry
print(json.dumps({u: dataclasses.asdict(t) for u, t in read_telemetry().items()}))
"""


def read(fake: FakeNvml) -> dict[str, Any]:
    fake.write()
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake.lib_dir), STATE_ENV: str(fake.state_path)}
    env["PYTHONPATH"] = str(REPO_SRC)
    done = subprocess.run(
        [sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_each_gpu_reports_its_readings_in_base_units(fake_nvml: FakeNvml) -> None:
    gpus = fake_nvml.state["gpus"]
    gpus[0].update(
        memory_used=12 * 1024**3,
        telemetry={"utilization": 87, "temperature": 64, "power_mw": 412_500},
    )
    readings = read(fake_nvml)
    assert readings[gpus[0]["uuid"]] == {
        "utilization": 0.87,
        "memory_used": 12 * 1024**3,
        "temperature": 64.0,
        "power": 412.5,
    }


def test_a_reading_the_gpu_cannot_give_is_none_not_an_error(fake_nvml: FakeNvml) -> None:
    gpus = fake_nvml.state["gpus"]  # no telemetry: those queries are NOT_SUPPORTED
    readings = read(fake_nvml)
    assert readings[gpus[1]["uuid"]] == {
        "utilization": None,
        "memory_used": 0,
        "temperature": None,
        "power": None,
    }
