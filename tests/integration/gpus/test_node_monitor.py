"""The node GPU monitor on the NVML stand-in, with real processes and real containers.

The monitor runs in a child process (``tests/kit/fake_nvml.MonitorProcess``)
whose pynvml loads the stand-in; the test writes the state (GPU processes
with the real host PIDs of real containers, XID events, ECC counters) and
reads back what the monitor told its sink.
"""

from __future__ import annotations

import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE
from tests.kit.fake_nvml import GIB, FakeNvml, MonitorProcess, add_event, fake_mig

pytestmark = pytest.mark.docker


def calls_named(calls: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [c for c in calls if c["call"] == name]


@pytest.fixture
def containers(docker_api: Any) -> Iterator[list[tuple[str, int]]]:
    """Two running busybox containers: ``[(id, host pid), ...]``."""
    label = f"gpudock-monitor-test={uuid.uuid4().hex[:8]}"
    made = [
        docker_api.containers.run(
            TEST_IMAGE, ["sleep", "300"], detach=True, init=True, labels=[label]
        )
        for _ in range(2)
    ]
    try:
        found = []
        for container in made:
            container.reload()
            found.append((container.id, int(container.attrs["State"]["Pid"])))
        yield found
    finally:
        for container in made:
            container.remove(force=True)


@pytest.fixture
def host_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process in no container (the test runner's own cgroup)."""
    proc = subprocess.Popen(["sleep", "300"])
    yield proc
    proc.kill()
    proc.wait()


def test_only_the_job_over_its_limit_is_reported_and_strays_are_found(
    fake_nvml: FakeNvml,
    containers: list[tuple[str, int]],
    host_process: subprocess.Popen[bytes],
) -> None:
    (within_id, within_pid), (over_id, over_pid) = containers
    gpu0, gpu1 = (g["uuid"] for g in fake_nvml.state["gpus"])
    fake_nvml.state["gpus"][0]["processes"] = [
        {"pid": within_pid, "usedGpuMemory": 3 * GIB},
        {"pid": over_pid, "usedGpuMemory": 6 * GIB + 100 * 1024**2},
        {"pid": host_process.pid, "usedGpuMemory": GIB},
    ]
    assignments = [
        {"job_id": 1, "gpu_uuids": [gpu0], "memory_limit": 4 * GIB},
        {"job_id": 2, "gpu_uuids": [gpu0], "memory_limit": 4 * GIB},
    ]
    with MonitorProcess(fake_nvml, [gpu0, gpu1]) as monitor:
        monitor.send("start")
        monitor.send("assign", assignments=assignments, containers={within_id: 1, over_id: 2})

        calls = monitor.send("watch")

        asked = {c["container"] for c in calls_named(calls, "job_of_container")}
        assert asked == {within_id, over_id}  # PID -> cgroup -> container id, for real
        [offence] = calls_named(calls, "over_limit")
        assert (offence["job_id"], offence["gpu_uuid"], offence["pid"]) == (2, gpu0, over_pid)
        assert offence["reason"] == (
            f"GPU memory limit exceeded: used 6.1 GiB of 4.0 GiB on {gpu0} (pid {over_pid})"
        )
        [stray] = calls_named(calls, "stray")
        assert (stray["pid"], stray["container"], stray["killed"]) == (
            host_process.pid,
            None,
            False,
        )
        again = monitor.send("watch")
        assert not calls_named(again, "over_limit") and not calls_named(again, "stray")
        assert not calls_named(again, "job_of_container")  # container answers are cached
    assert host_process.poll() is None  # reported, never killed unless the config says so


def test_a_job_on_a_gpu_it_was_not_given_is_an_offence(
    fake_nvml: FakeNvml, containers: list[tuple[str, int]]
) -> None:
    (job_id, pid), _ = containers
    gpu0, gpu1 = (g["uuid"] for g in fake_nvml.state["gpus"])
    fake_nvml.state["gpus"][1]["processes"] = [{"pid": pid, "usedGpuMemory": GIB}]
    with MonitorProcess(fake_nvml, [gpu0, gpu1]) as monitor:
        monitor.send("start")
        monitor.send(
            "assign", assignments=[{"job_id": 7, "gpu_uuids": [gpu0]}], containers={job_id: 7}
        )

        [offence] = calls_named(monitor.send("watch"), "over_limit")

    assert (offence["job_id"], offence["gpu_uuid"], offence["limit"]) == (7, gpu1, 0)
    assert "not allocated to the job" in offence["reason"]


def test_kill_strays_kills_the_stray_only(
    fake_nvml: FakeNvml, host_process: subprocess.Popen[bytes]
) -> None:
    gpu0 = fake_nvml.state["gpus"][0]["uuid"]
    fake_nvml.state["gpus"][0]["processes"] = [{"pid": host_process.pid, "usedGpuMemory": GIB}]
    config = {"watchdog": {"kill_strays": True}}
    with MonitorProcess(fake_nvml, [gpu0], config) as monitor:
        monitor.send("start")
        monitor.send("assign", assignments=[{"job_id": 1, "gpu_uuids": [gpu0]}])

        [stray] = calls_named(monitor.send("watch"), "stray")

    assert stray["killed"] is True
    assert host_process.wait(timeout=10) == -9


def test_xid_and_ecc_events_arrive_classified(fake_nvml: FakeNvml) -> None:
    gpus = fake_nvml.state["gpus"]
    gpus[0]["ecc"] = {"corrected": 0, "uncorrected": 0}
    config = {"health": {"xid_classes": {13: "node"}}}
    with MonitorProcess(fake_nvml, [g["uuid"] for g in gpus], config) as monitor:
        monitor.send("start")  # registration is done when start returns
        for gpu, kind, data in ((0, "xid", 48), (1, "xid", 31), (1, "xid", 13), (0, "dbe", 0)):
            add_event(fake_nvml.state, gpu, kind, data)
        fake_nvml.write()

        faults = calls_named(monitor.send("wait", n=4, timeout=10), "gpu_fault")

    seen = [(f["gpu_uuid"], f["kind"], f["fault_class"], f["code"]) for f in faults]
    assert seen == [
        (gpus[0]["uuid"], "xid", "gpu_reset", 48),  # double bit ECC: reset the GPU
        (gpus[1]["uuid"], "xid", "application", 31),  # a page fault: the job's
        (gpus[1]["uuid"], "xid", "node", 13),  # the config's override
        (gpus[0]["uuid"], "ecc_uncorrected", "gpu_reset", None),
    ]
    assert faults[0]["detail"] == "double bit ECC error"


def test_gpus_without_events_are_polled(fake_nvml: FakeNvml) -> None:
    gpus = fake_nvml.state["gpus"]
    gpus[1].update(events=False, ecc={"corrected": 5, "uncorrected": 0})
    with MonitorProcess(fake_nvml, [g["uuid"] for g in gpus]) as monitor:
        monitor.send("start")  # the counters now are the baseline
        gpus[1]["ecc"] = {"corrected": 7, "uncorrected": 1}
        gpus[0]["fail"] = True  # queries now answer GPU_IS_LOST
        fake_nvml.write()

        faults = calls_named(monitor.send("poll"), "gpu_fault")
        again = calls_named(monitor.send("poll"), "gpu_fault")

    kinds = sorted((f["gpu_uuid"] == gpus[1]["uuid"], f["kind"], f["fault_class"]) for f in faults)
    assert kinds == [
        (False, "lost", "gpu_reset"),
        (True, "ecc_corrected", "info"),
        (True, "ecc_uncorrected", "gpu_reset"),
    ]
    assert again == []  # a lost GPU is reported once; counters moved on


def test_without_nvml_only_the_mps_check_runs(fake_nvml: FakeNvml, tmp_path: Path) -> None:
    fake_nvml.state["init_error"] = 9  # driver not loaded
    pipe = tmp_path / "mps"
    pipe.mkdir()
    daemon = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    daemon.bind(str(pipe / "control"))
    daemon.listen(8)
    config = {"mps": {"pipe_dir": str(pipe), "log_dir": str(tmp_path / "log")}}
    try:
        with MonitorProcess(fake_nvml, [fake_nvml.state["gpus"][0]["uuid"]], config) as monitor:
            [sharing] = calls_named(monitor.send("start"), "sharing")
            assert sharing["mode"] == "mps"
            assert sharing["mps"] == {"pipe_dir": str(pipe), "log_dir": str(tmp_path / "log")}
            daemon.close()  # the daemon goes away: its socket refuses connections
            [changed] = calls_named(monitor.send("poll"), "sharing")
            assert (changed["mode"], changed["mps"]) == ("time-slice", None)
            assert monitor.send("watch") == []  # no NVML: no watchdog pass does anything
    finally:
        daemon.close()


def test_a_mig_jobs_processes_are_judged_against_its_mig_device(
    fake_nvml: FakeNvml,
    containers: list[tuple[str, int]],
    host_process: subprocess.Popen[bytes],
) -> None:
    """NVML lists a MIG GPU's processes with their GPU instance: each is judged on its MIG
    device, so a MIG job on its own device is fine (its parent was given to no job), one
    on another job's device offends, and a host process on a held device is a stray."""
    (own_id, own_pid), (other_id, other_pid) = containers
    small, big = fake_mig(0, 0, "1g.10gb", 10 * GIB), fake_mig(0, 1, "3g.40gb", 40 * GIB)
    small["processes"] = [{"pid": own_pid, "usedGpuMemory": 9 * GIB}]
    big["processes"] = [
        {"pid": other_pid, "usedGpuMemory": GIB},
        {"pid": host_process.pid, "usedGpuMemory": GIB},
    ]
    gpu = fake_nvml.state["gpus"][0]
    gpu.update(mig={"current": 1, "pending": 1}, mig_devices=[small, big])
    assignments = [
        {"job_id": 1, "gpu_uuids": [small["uuid"]]},  # its own device: whole, no limit
        {"job_id": 2, "gpu_uuids": [small["uuid"]]},  # but it runs on the 3g.40gb
        {"job_id": 3, "gpu_uuids": [big["uuid"]]},
    ]
    with MonitorProcess(fake_nvml, [gpu["uuid"]]) as monitor:
        monitor.send("start")
        monitor.send("assign", assignments=assignments, containers={own_id: 1, other_id: 2})

        calls = monitor.send("watch")

    [offence] = calls_named(calls, "over_limit")
    assert (offence["job_id"], offence["gpu_uuid"], offence["limit"]) == (2, big["uuid"], 0)
    [stray] = calls_named(calls, "stray")
    assert (stray["gpu_uuid"], stray["pid"]) == (big["uuid"], host_process.pid)
