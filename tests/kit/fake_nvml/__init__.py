"""A stand-in ``libnvidia-ml.so.1`` so the real pynvml code paths run without a GPU.

How it is loaded: pynvml opens ``CDLL("libnvidia-ml.so.1")`` on its first
``nvmlInit`` and caches the handle in a module global for the life of the
process; glibc also reads ``LD_LIBRARY_PATH`` only at process start. So every
discovery against the fake runs in a fresh Python **subprocess** whose
``LD_LIBRARY_PATH`` names the directory holding the compiled fake. That is
the exact loading path of production (no patching of pynvml's private
globals), keeps tests independent of each other, and lets one test run with
no library at all.

The library re-reads its state on every ``nvmlInit`` and whenever a call
finds the file replaced, so a test may rewrite the state between calls, and
a long-lived NVML session (the watchdog's) sees the change at its next
query. The Python-facing state is a JSON-able dict::

    {
      "init_error": 0,               # NVML return code for nvmlInit; 9 = driver not loaded
      "driver_version": "550.54.15",
      "cuda_version": 12040,         # CUDA 12.4
      "gpus": [fake_gpu(0), ...],    # see fake_gpu()
      "events": [{"seq": 1, "gpu": 0, "type": "xid", "data": 79}, ...],  # see add_event()
    }

which ``FakeNvml.write`` validates and writes in the line format the C side
reads (see the header of ``fake_nvml.c``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

SOURCE = Path(__file__).with_name("fake_nvml.c")
CHILD = Path(__file__).with_name("_child.py")
LIBRARY_NAME = "libnvidia-ml.so.1"
STATE_ENV = "GPUDOCK_FAKE_NVML_STATE"
REPO_SRC = Path(__file__).resolve().parents[3] / "src"
GIB = 1024**3
GCC_FLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-pthread"]

_GPU_KEYS = {
    "uuid",
    "name",
    "memory_total",
    "memory_used",
    "mig",
    "processes",
    "fail",
    "pci_bus_id",
    "numa_node",
    "nvlink_peers",
    "telemetry",
    "brand",
    "arch",
    "ecc",
    "events",
    "mig_devices",
}
_MIG_KEYS = {"uuid", "profile", "memory_total", "memory_used", "gi", "ci", "processes"}
_STATE_KEYS = {"init_error", "driver_version", "cuda_version", "gpus", "events"}
EVENT_TYPES = {"sbe": 0x1, "dbe": 0x2, "xid": 0x8}
"""NVML event type bits by name (``nvmlEventTypeSingleBitEccError`` ...)."""
_FAIL_CODES = {False: 0, True: 1, "handle": 2}


def require_gcc() -> str:
    """Return gcc's path; skip the test without it, or fail it under ``CI=true``."""
    gcc = shutil.which("gcc")
    if gcc is None:
        message = "gcc is needed to build the fake libnvidia-ml.so.1"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return gcc


def build_fake_nvml(dest_dir: Path) -> Path:
    """Compile (or reuse) the fake and return ``dest_dir/libnvidia-ml.so.1``.

    Builds are cached by a hash of the source and flags under the system temp
    dir, so only the first test of a session pays for gcc (about 0.2 s). The
    cache entry is written atomically, so parallel test runs are safe.
    """
    gcc = require_gcc()
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(GCC_FLAGS).encode()).hexdigest()
    cached = Path(tempfile.gettempdir()) / f"gpudock-fake-nvml-{os.getuid()}" / digest[:16]
    cached_lib = cached / LIBRARY_NAME
    if not cached_lib.exists():
        cached.mkdir(parents=True, exist_ok=True)
        partial = cached / f".{LIBRARY_NAME}.{os.getpid()}"
        command = [gcc, *GCC_FLAGS, f"-Wl,-soname,{LIBRARY_NAME}", "-o", str(partial), str(SOURCE)]
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"gcc could not build the fake NVML:\n{done.stderr}")
        os.replace(partial, cached_lib)
    dest_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(cached_lib, dest_dir / LIBRARY_NAME)
    return dest_dir / LIBRARY_NAME


def fake_gpu(index: int, **overrides: Any) -> dict[str, Any]:
    """A healthy fake H100 80GB with a stable UUID derived from ``index``.

    Keys: ``uuid``, ``name``, ``memory_total`` and ``memory_used`` (bytes),
    ``mig`` (``"unsupported"`` or ``{"current": 0|1, "pending": 0|1}``),
    ``processes`` (``[{"pid": int, "usedGpuMemory": int}]``), ``fail``
    (False; True = queries after the handle/UUID return GPU_IS_LOST;
    ``"handle"`` = even the handle lookup does), and topology:
    ``pci_bus_id`` (NVML form; by default ``0000FA57:<0x10+index>:00.0``, a
    PCI domain no real host has, so the sysfs NUMA fallback finds nothing),
    ``numa_node`` (int, default 0; None = memory affinity NOT_SUPPORTED) and
    ``nvlink_peers``: one entry per NVLink, in link order: a GPU's position in
    the state's ``gpus`` list, a PCI bus id string (a non-GPU end such as an
    NVSwitch), or None (a link that is down). Empty (the default): the GPU has
    no NVLink and every link query is NOT_SUPPORTED. ``telemetry``: None (the
    default: utilisation, temperature and power are NOT_SUPPORTED) or
    ``{"utilization": percent, "temperature": celsius, "power_mw": milliwatts}``.
    Health and identity: ``brand`` (NVML's ``nvmlBrandType_t``, default 14 =
    NVIDIA), ``arch`` (compute capability ``[major, minor]``, default ``[9, 0]``),
    ``ecc`` (None: ECC queries NOT_SUPPORTED, the default; else ``{"corrected":
    n, "uncorrected": n}``), ``events`` (True: the GPU takes event
    registrations; False: NOT_SUPPORTED, so gpudock falls back to polling).
    ``mig_devices``: the MIG devices of a GPU in MIG mode (``fake_mig()``).
    """
    gpu: dict[str, Any] = {
        "uuid": f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'fake-nvml/{index}')}",
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total": 80 * GIB,
        "memory_used": 0,
        "mig": {"current": 0, "pending": 0},
        "processes": [],
        "fail": False,
        "pci_bus_id": fake_bus_id(index),
        "numa_node": 0,
        "nvlink_peers": [],
        "events": True,
        "mig_devices": [],
    }
    gpu.update(overrides)
    return gpu


def fake_mig(
    gpu: int, slot: int, profile: str, memory_total: int, **overrides: Any
) -> dict[str, Any]:
    """A MIG device of fake GPU ``gpu``: ``profile`` (e.g. ``1g.10gb``) with
    ``memory_total`` bytes, in GPU instance ``slot`` (compute instance 0), with a
    stable ``MIG-`` UUID. Keys: ``uuid``, ``profile``, ``memory_total``,
    ``memory_used``, ``gi``, ``ci`` and ``processes`` (as a GPU's)."""
    mig: dict[str, Any] = {
        "uuid": f"MIG-{uuid.uuid5(uuid.NAMESPACE_OID, f'fake-nvml/{gpu}/mig/{slot}')}",
        "profile": profile,
        "memory_total": memory_total,
        "memory_used": 0,
        "gi": slot,
        "ci": 0,
        "processes": [],
    }
    mig.update(overrides)
    return mig


def add_event(state: dict[str, Any], gpu: int, kind: str, data: int = 0) -> int:
    """Append an NVML event (``kind``: ``xid``, ``sbe`` or ``dbe``; ``data``: the XID)
    for GPU index ``gpu`` to ``state`` and return its sequence number. Written
    with the state, it is delivered once to every event set that registered the
    GPU before it was written."""
    events = state.setdefault("events", [])
    seq = max((e["seq"] for e in events), default=0) + 1
    events.append({"seq": seq, "gpu": gpu, "type": kind, "data": data})
    return seq


def fake_bus_id(index: int) -> str:
    """The default PCI bus id of fake GPU ``index`` (NVML's 8-digit-domain form)."""
    return f"0000FA57:{0x10 + index:02X}:00.0"


def default_state(gpus: int = 2) -> dict[str, Any]:
    """A driver 550.54.15 / CUDA 12.4 host with ``gpus`` healthy fake H100s."""
    return {
        "init_error": 0,
        "driver_version": "550.54.15",
        "cuda_version": 12040,
        "gpus": [fake_gpu(i) for i in range(gpus)],
    }


def render_state(state: dict[str, Any]) -> str:
    """Validate ``state`` and return it in the C side's line format."""
    _check_keys("state", state, _STATE_KEYS)
    lines = [
        f"init_error {int(state.get('init_error', 0))}",
        f"driver {_one_line(str(state.get('driver_version', '550.54.15')))}",
        f"cuda {int(state.get('cuda_version', 12040))}",
    ]
    gpus = state.get("gpus", [])
    for gpu in gpus:
        _check_keys("gpu", gpu, _GPU_KEYS)
        mig = gpu.get("mig", "unsupported")
        current, pending = (-1, -1) if mig == "unsupported" else (mig["current"], mig["pending"])
        uuid_text = gpu["uuid"]
        if not uuid_text or any(ch.isspace() for ch in uuid_text):
            raise ValueError(f"fake GPU uuid must be one word, got {uuid_text!r}")
        lines.append(
            f"gpu {_FAIL_CODES[gpu.get('fail', False)]} {int(current)} {int(pending)} "
            f"{int(gpu['memory_total'])} {int(gpu.get('memory_used', 0))} {uuid_text} "
            f"{_one_line(gpu['name'])}"
        )
        lines += [
            f"proc {int(p['pid'])} {int(p['usedGpuMemory'])}" for p in gpu.get("processes", [])
        ]
        lines += _topology_lines(gpu, gpus)
        if (telemetry := gpu.get("telemetry")) is not None:
            values = (telemetry["utilization"], telemetry["temperature"], telemetry["power_mw"])
            lines.append("telemetry " + " ".join(str(int(v)) for v in values))
        lines += _health_lines(gpu)
        for mig in gpu.get("mig_devices", []):
            _check_keys("mig device", mig, _MIG_KEYS)
            lines.append(
                f"mig {int(mig['gi'])} {int(mig['ci'])} {int(mig['memory_total'])} "
                f"{int(mig.get('memory_used', 0))} {_word(mig['uuid'])} {_word(mig['profile'])}"
            )
            lines += [
                f"proc {int(p['pid'])} {int(p['usedGpuMemory'])}" for p in mig.get("processes", [])
            ]
    for event in state.get("events", []):
        lines.append(
            f"event {int(event['seq'])} {int(event['gpu'])} {EVENT_TYPES[event['type']]} "
            f"{int(event.get('data', 0))}"
        )
    return "\n".join(lines) + "\n"


def _health_lines(gpu: dict[str, Any]) -> list[str]:
    """``brand``, ``arch``, ``ecc`` and ``events`` lines of one GPU (see ``fake_gpu``)."""
    lines = []
    if (brand := gpu.get("brand")) is not None:
        lines.append(f"brand {int(brand)}")
    if (arch := gpu.get("arch")) is not None:
        lines.append(f"arch {int(arch[0])} {int(arch[1])}")
    if (ecc := gpu.get("ecc")) is not None:
        lines.append(f"ecc {int(ecc['corrected'])} {int(ecc['uncorrected'])}")
    lines.append(f"events {1 if gpu.get('events', True) else 0}")
    return lines


def _word(text: str) -> str:
    if not text or any(ch.isspace() for ch in text):
        raise ValueError(f"fake NVML identifiers must be one word, got {text!r}")
    return text


def _topology_lines(gpu: dict[str, Any], gpus: list[dict[str, Any]]) -> list[str]:
    """``pci``, ``numa`` and ``link`` lines of one GPU (see ``fake_gpu``)."""
    lines = []
    if gpu.get("pci_bus_id") is not None:
        lines.append(f"pci {_bus_id(gpu['pci_bus_id'])}")
    numa = gpu.get("numa_node")
    lines.append(f"numa {-1 if numa is None else int(numa)}")
    peers = gpu.get("nvlink_peers", [])
    if len(peers) > 36:
        raise ValueError(f"a fake GPU has at most 36 NVLinks, got {len(peers)}")
    for peer in peers:
        if peer is None:
            lines.append("link 0 00000000:00:00.0")
        elif isinstance(peer, int):
            if not 0 <= peer < len(gpus) or gpus[peer].get("pci_bus_id") is None:
                raise ValueError(f"nvlink peer {peer} is no GPU with a pci_bus_id in the state")
            lines.append(f"link 1 {_bus_id(gpus[peer]['pci_bus_id'])}")
        else:
            lines.append(f"link 1 {_bus_id(peer)}")
    return lines


def _bus_id(text: str) -> str:
    if not re.fullmatch(r"[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]", text):
        raise ValueError(f"fake PCI bus id must look like 00000000:18:00.0, got {text!r}")
    return text


class FakeNvml:
    """One test's fake NVML: a library directory plus a rewritable state file."""

    def __init__(self, lib_dir: Path, state_path: Path, state: dict[str, Any] | None = None):
        self.lib_dir = lib_dir
        self.state_path = state_path
        self.state: dict[str, Any] = state if state is not None else default_state()

    def write(self) -> None:
        """Write ``self.state`` atomically (a new file replaces the old); the library
        picks it up at its next ``nvmlInit`` or query."""
        partial = self.state_path.with_name(f".{self.state_path.name}.{os.getpid()}")
        partial.write_text(render_state(self.state))
        os.replace(partial, self.state_path)

    def discover(
        self, node_name: str = "node-a", process_uuids: tuple[str, ...] = ()
    ) -> dict[str, Any]:
        """Write the state, then run discovery in a subprocess against the fake."""
        self.write()
        return run_discovery_subprocess(
            lib_dir=self.lib_dir,
            state_path=self.state_path,
            node_name=node_name,
            process_uuids=process_uuids,
        )


def make_fake_nvml(tmp_path: Path) -> FakeNvml:
    """Build the library into ``tmp_path/lib`` and return a FakeNvml (for fixtures)."""
    lib = build_fake_nvml(tmp_path / "lib")
    return FakeNvml(lib.parent, tmp_path / "fake-nvml-state.txt")


def run_discovery_subprocess(
    *,
    lib_dir: Path | None,
    state_path: Path | None = None,
    node_name: str = "node-a",
    emulate: str | None = None,
    process_uuids: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run ``gpudock.gpus.discover`` in a fresh interpreter and return its report.

    ``lib_dir=None`` runs with no ``LD_LIBRARY_PATH`` at all (library absent).
    The report is ``{"inventory": asdict(NodeInventory), "logs": [{"logger",
    "level", "message"}, ...] (records emitted by discover), "processes":
    {uuid: [[pid, used], ...] | {"error", "message"}}}``. Raises
    AssertionError with the child's stderr when it crashes.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", STATE_ENV)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_SRC), env.get("PYTHONPATH")]))
    if lib_dir is not None:
        env["LD_LIBRARY_PATH"] = str(lib_dir)
    if state_path is not None:
        env[STATE_ENV] = str(state_path)
    request = {"node": node_name, "emulate": emulate, "process_uuids": list(process_uuids)}
    done = subprocess.run(
        [sys.executable, str(CHILD), json.dumps(request)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"discovery subprocess failed ({done.returncode}):\n{done.stderr}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _check_keys(what: str, data: dict[str, Any], allowed: set[str]) -> None:
    unknown = set(data) - allowed
    if unknown:
        raise ValueError(
            f"unknown fake NVML {what} keys {sorted(unknown)}; allowed: {sorted(allowed)}"
        )


def _one_line(text: str) -> str:
    if not text or "\n" in text or "\r" in text:
        raise ValueError(f"fake NVML text fields must be one non-empty line, got {text!r}")
    return text


MONITOR_CHILD = Path(__file__).with_name("_monitor_child.py")


class MonitorProcess:
    """A ``NodeGpuMonitor`` in a child process on this fake NVML, driven step by step.

    ``send(op, **fields)`` runs one command (``start``, ``watch``, ``poll``,
    ``wait``, ``assign``, ``stop``; see ``_monitor_child.py``) and returns the
    sink calls it caused. Use as a context manager: the child is stopped after.
    """

    def __init__(
        self,
        fake: FakeNvml,
        gpus: list[str],
        config: dict[str, Any] | None = None,
        sharing: str = "auto",
    ) -> None:
        fake.write()
        env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", STATE_ENV)}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_SRC), env.get("PYTHONPATH")]))
        env["LD_LIBRARY_PATH"] = str(fake.lib_dir)
        env[STATE_ENV] = str(fake.state_path)
        setup = {"gpus": gpus, "config": config or {}, "sharing": sharing}
        self.proc = subprocess.Popen(
            [sys.executable, str(MONITOR_CHILD), json.dumps(setup)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def send(self, op: str, **fields: Any) -> list[dict[str, Any]]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"monitor child died on {op!r}:\n{stderr}")
        calls: list[dict[str, Any]] = json.loads(line)["calls"]
        return calls

    def __enter__(self) -> MonitorProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(AssertionError, OSError):
                self.send("stop")
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
