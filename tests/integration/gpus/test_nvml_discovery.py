"""NVML discovery through the real pynvml loading path, against the C stand-in.

Each discovery runs in a subprocess whose LD_LIBRARY_PATH points at the fake
``libnvidia-ml.so.1`` (see ``tests/kit/fake_nvml``).
"""

from __future__ import annotations

import ctypes.util
from typing import Any

import pytest
from tests.kit.fake_nvml import GIB, FakeNvml, fake_gpu, fake_mig, run_discovery_subprocess

NVSWITCH = "00000000:C1:00.0"


def _warnings(report: dict[str, Any]) -> list[str]:
    return [r["message"] for r in report["logs"] if r["level"] in ("WARNING", "ERROR", "CRITICAL")]


def test_discovers_gpus_with_names_memory_mig_and_versions(fake_nvml: FakeNvml) -> None:
    fake_nvml.state.update(driver_version="535.161.08", cuda_version=12020)
    fake_nvml.state["gpus"] = [
        fake_gpu(0, name="NVIDIA H100 80GB HBM3", mig={"current": 1, "pending": 1}),
        fake_gpu(1, name="NVIDIA H100 80GB HBM3", mig={"current": 0, "pending": 1}),
        fake_gpu(2, name="NVIDIA A100-SXM4-40GB", memory_total=40 * GIB),
        fake_gpu(3, name="Tesla T4", memory_total=15360 * 1024**2, mig="unsupported"),
    ]

    report = fake_nvml.discover("gpu-host-1")

    inventory = report["inventory"]
    assert inventory["name"] == "gpu-host-1"
    assert inventory["source"] == "nvml"
    assert inventory["driver_version"] == "535.161.08"
    assert inventory["cuda_version"] == "12.2"
    assert inventory["note"] is None
    gpus = inventory["gpus"]
    assert [g["index"] for g in gpus] == [0, 1, 2, 3]
    assert [g["uuid"] for g in gpus] == [g["uuid"] for g in fake_nvml.state["gpus"]]
    assert [g["name"] for g in gpus] == [
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA A100-SXM4-40GB",
        "Tesla T4",
    ]
    assert [g["memory_total"] for g in gpus] == [80 * GIB, 80 * GIB, 40 * GIB, 15360 * 1024**2]
    # The *current* mode counts; a pending change takes effect only after a GPU reset.
    assert [g["mig_mode"] for g in gpus] == [True, False, False, None]
    assert all(g["health"] == "ok" and g["emulated"] is False for g in gpus)
    assert _warnings(report) == []


def test_init_failure_gives_zero_gpus_and_one_warning(fake_nvml: FakeNvml) -> None:
    fake_nvml.state["init_error"] = 9  # NVML_ERROR_DRIVER_NOT_LOADED

    report = fake_nvml.discover("node-a")

    reason = "NVML not available (Driver Not Loaded): the NVIDIA kernel driver is not loaded"
    assert report["inventory"] == {
        "name": "node-a",
        "gpus": [],
        "driver_version": None,
        "cuda_version": None,
        "source": "none",
        "note": reason,
        "mig_devices": [],
    }
    assert [(r["logger"], r["level"]) for r in report["logs"]] == [("gpudock.gpus", "WARNING")]
    assert _warnings(report) == [f"no GPUs discovered on node-a: {reason}"]


def test_library_absent_gives_zero_gpus_with_the_reason() -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real libnvidia-ml is installed on this host")

    report = run_discovery_subprocess(lib_dir=None, node_name="cpu-only")

    reason = "NVML not available (NVML Shared Library Not Found): no NVIDIA driver on this host"
    assert report["inventory"]["gpus"] == []
    assert report["inventory"]["source"] == "none"
    assert report["inventory"]["note"] == reason
    assert _warnings(report) == [f"no GPUs discovered on cpu-only: {reason}"]


def test_a_lost_gpu_is_reported_unhealthy(fake_nvml: FakeNvml) -> None:
    lost_uuid = fake_nvml.state["gpus"][1]["uuid"]
    fake_nvml.state["gpus"][1]["fail"] = True

    report = fake_nvml.discover()

    healthy, lost = report["inventory"]["gpus"]
    assert healthy["health"] == "ok"
    assert lost == {
        "index": 1,
        "uuid": lost_uuid,
        "name": "unknown",
        "memory_total": 0,
        "mig_mode": None,
        "emulated": False,
        "health": "unhealthy",
        "numa": None,  # topology queries fail on a lost GPU too: unknown, not a problem
        "nvlink": None,
        "brand": None,
        "arch": None,
    }
    problem = (
        f"GPU 1 ({lost_uuid}) unhealthy: "
        "name: GPU is lost, memory: GPU is lost, MIG mode: GPU is lost"
    )
    assert report["inventory"]["note"] == problem
    assert _warnings(report) == [problem]


def test_a_gpu_that_cannot_be_identified_is_left_out(fake_nvml: FakeNvml) -> None:
    fake_nvml.state["gpus"].append(fake_gpu(2, fail="handle"))

    report = fake_nvml.discover()

    assert [g["index"] for g in report["inventory"]["gpus"]] == [0, 1]
    assert report["inventory"]["note"] == "GPU 2 cannot be identified (GPU is lost); left out"


def test_reports_per_process_gpu_memory(fake_nvml: FakeNvml) -> None:
    busy, idle = (g["uuid"] for g in fake_nvml.state["gpus"])
    fake_nvml.state["gpus"][0]["processes"] = [
        {"pid": 4242, "usedGpuMemory": 3 * GIB},
        {"pid": 4343, "usedGpuMemory": 512 * 1024**2},
    ]

    report = fake_nvml.discover(process_uuids=(busy, idle, "GPU-not-there"))

    # (pid, used, MIG GPU instance): None, on a GPU itself
    assert report["processes"][busy] == [[4242, 3 * GIB, None], [4343, 512 * 1024**2, None]]
    assert report["processes"][idle] == []
    assert report["processes"]["GPU-not-there"] == {
        "error": "GpuQueryFailed",
        "message": "cannot list processes on GPU GPU-not-there: Not Found",
    }


def test_a_rewritten_state_shows_in_the_next_discovery(fake_nvml: FakeNvml) -> None:
    assert len(fake_nvml.discover()["inventory"]["gpus"]) == 2

    fake_nvml.state["gpus"].append(fake_gpu(2))

    assert len(fake_nvml.discover()["inventory"]["gpus"]) == 3


def _topology(report: dict[str, Any]) -> list[tuple[int | None, int | None]]:
    return [(g["numa"], g["nvlink"]) for g in report["inventory"]["gpus"]]


def test_numa_nodes_come_from_nvml_memory_affinity(fake_nvml: FakeNvml) -> None:
    fake_nvml.state["gpus"] = [fake_gpu(i, numa_node=node) for i, node in enumerate([0, 0, 1, 70])]

    report = fake_nvml.discover()

    assert [numa for numa, _ in _topology(report)] == [0, 0, 1, 70]  # 70: second mask word
    assert _warnings(report) == []


def test_unknown_numa_node_is_none_never_a_problem(fake_nvml: FakeNvml) -> None:
    # Memory affinity NOT_SUPPORTED and no sysfs entry for the (fake) PCI bus id.
    fake_nvml.state["gpus"][1]["numa_node"] = None

    report = fake_nvml.discover()

    assert _topology(report) == [(0, None), (None, None)]
    assert report["inventory"]["note"] is None and _warnings(report) == []


def test_nvlink_domains_are_the_connected_components_of_active_links(fake_nvml: FakeNvml) -> None:
    gpus = [fake_gpu(i) for i in range(6)]
    gpus[0]["nvlink_peers"] = [1, None]  # link 1 is down
    gpus[1]["nvlink_peers"] = [0, 2]
    gpus[2]["nvlink_peers"] = [1]  # 0-1-2 is a chain: still one domain
    gpus[3]["nvlink_peers"] = [4, 4]  # two links to the same peer
    gpus[4]["nvlink_peers"] = [3, 3]
    gpus[5]["nvlink_peers"] = [None, None]  # NVLink-capable, every link down
    fake_nvml.state["gpus"] = gpus

    report = fake_nvml.discover()

    assert [nvlink for _, nvlink in _topology(report)] == [0, 0, 0, 1, 1, None]
    assert _warnings(report) == []


def test_gpus_wired_to_nvswitches_share_one_domain(fake_nvml: FakeNvml) -> None:
    gpus = [fake_gpu(i, nvlink_peers=[NVSWITCH] * 18) for i in range(8)]
    gpus.append(fake_gpu(8))  # a PCIe card in the same host: NVLink NOT_SUPPORTED
    fake_nvml.state["gpus"] = gpus

    report = fake_nvml.discover()

    assert [nvlink for _, nvlink in _topology(report)] == [0] * 8 + [None]


def test_a_lone_gpu_behind_a_switch_has_no_nvlink_domain(fake_nvml: FakeNvml) -> None:
    fake_nvml.state["gpus"][0]["nvlink_peers"] = [NVSWITCH]

    assert _topology(fake_nvml.discover()) == [(0, None), (0, None)]


def test_topology_of_a_lost_gpu_is_unknown_and_its_peers_keep_theirs(fake_nvml: FakeNvml) -> None:
    gpus = [fake_gpu(i) for i in range(3)]
    gpus[0]["nvlink_peers"] = [1, 2]
    gpus[1]["nvlink_peers"] = [0]
    gpus[2]["nvlink_peers"] = [0]
    gpus[2]["fail"] = True  # every query but handle and UUID: GPU is lost
    fake_nvml.state["gpus"] = gpus

    report = fake_nvml.discover()

    # GPU 0 still reports its link to GPU 2's bus id, but GPU 2's own bus id is
    # unknown, so it cannot be matched: only 0 and 1 form a domain.
    assert _topology(report) == [(0, 0), (0, 0), (None, None)]
    assert [g["health"] for g in report["inventory"]["gpus"]] == ["ok", "ok", "unhealthy"]


def test_mig_devices_of_gpus_in_mig_mode_are_discovered(fake_nvml: FakeNvml) -> None:
    big, small = fake_mig(0, 0, "3g.40gb", 40 * GIB), fake_mig(0, 2, "1g.10gb", 10 * GIB)
    pending_only = fake_mig(1, 0, "7g.80gb", 80 * GIB)  # MIG turns on after a reset only
    fake_nvml.state["gpus"] = [
        fake_gpu(0, mig={"current": 1, "pending": 1}, mig_devices=[big, small]),
        fake_gpu(1, mig={"current": 0, "pending": 1}, mig_devices=[pending_only]),
        fake_gpu(2, name="NVIDIA A100-SXM4-40GB", brand=2, arch=[8, 0]),
    ]

    report = fake_nvml.discover()

    parent = fake_nvml.state["gpus"][0]["uuid"]
    assert report["inventory"]["mig_devices"] == [
        {"uuid": big["uuid"], "parent_uuid": parent, "slot": 0, "profile": "3g.40gb",
         "memory_total": 40 * GIB, "gpu_instance": 0, "compute_instance": 0},
        {"uuid": small["uuid"], "parent_uuid": parent, "slot": 1, "profile": "1g.10gb",
         "memory_total": 10 * GIB, "gpu_instance": 2, "compute_instance": 0},
    ]  # fmt: skip
    gpus = report["inventory"]["gpus"]
    assert [(g["brand"], g["arch"]) for g in gpus] == [
        ("nvidia", "9.0"),
        ("nvidia", "9.0"),
        ("tesla", "8.0"),
    ]
    assert _warnings(report) == []


def test_a_mig_device_processes_and_memory_answer_by_its_uuid(fake_nvml: FakeNvml) -> None:
    mig = fake_mig(0, 0, "1g.10gb", 10 * GIB, processes=[{"pid": 77, "usedGpuMemory": GIB}])
    fake_nvml.state["gpus"][0].update(mig={"current": 1, "pending": 1}, mig_devices=[mig])
    parent = fake_nvml.state["gpus"][0]["uuid"]

    report = fake_nvml.discover(process_uuids=(mig["uuid"], parent))

    assert report["processes"][mig["uuid"]] == [[77, GIB, 0]]  # in GPU instance 0
    assert report["processes"][parent] == [[77, GIB, 0]]  # the parent lists its MIG processes
