"""GPU sharing end to end: a real server on the real dockerd and the NVML stand-in.

One server for the module (it costs a few seconds to start). Its GPUs come
from the C stand-in, not the emulator: GPU 0 and 1 whole, GPU 2 in MIG mode
with two MIG devices. The tests give the stand-in the host PIDs of the jobs'
real containers and XID events, and watch the server act on them.
"""

from __future__ import annotations

import copy
import io
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from tests.integration.e2e.conftest import teardown
from tests.kit.docker import TEST_IMAGE
from tests.kit.fake_nvml import GIB, FakeNvml, add_event, fake_gpu, fake_mig, make_fake_nvml
from tests.kit.server import (
    FAST_CONFIG,
    ServerProcess,
    job_state,
    submit,
    wait_for,
    wait_settled,
    wait_state,
)

from gpudock.sim.cluster import parse_cluster
from gpudock.sim.engine import Simulator
from gpudock.sim.policies import POLICIES
from gpudock.sim.traces import TraceJob

pytestmark = pytest.mark.docker

SLEEP = {"image": TEST_IMAGE, "command": ["sleep", "300"]}
CONFIG = {
    **FAST_CONFIG,
    "gpus": {"watchdog": {"grace": "0s"}, "health": {"poll_interval": "1s"}},
    "scheduler": {"priority_classes": [{"name": "urgent", "value": 10, "preempt": True}]},
}


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> FakeNvml:
    fake = make_fake_nvml(tmp_path_factory.mktemp("nvml"))
    mig = {"current": 1, "pending": 1}
    devices = [fake_mig(2, 0, "3g.40gb", 40 * GIB), fake_mig(2, 1, "1g.10gb", 10 * GIB)]
    fake.state["gpus"] = [fake_gpu(0), fake_gpu(1), fake_gpu(2, mig=mig, mig_devices=devices)]
    fake.write()
    return fake


@pytest.fixture(scope="module")
def server(
    docker: Any, fake: FakeNvml, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    env = {"LD_LIBRARY_PATH": str(fake.lib_dir), "GPUDOCK_FAKE_NVML_STATE": str(fake.state_path)}
    home = tmp_path_factory.mktemp("home")
    srv = ServerProcess(home, emulate=None, config=CONFIG, env=env).start()
    yield srv
    teardown(srv, docker)


@pytest.fixture
def api(server: ServerProcess, fake: FakeNvml) -> Iterator[httpx.Client]:
    """The admin's client; the stand-in's GPUs are restored and every job cancelled after."""
    pristine = copy.deepcopy(fake.state)
    client = server.api()
    yield client
    for job in client.get("/v1/jobs").json():
        if job["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED", "LOST"):
            client.post(f"/v1/jobs/{job['id']}/cancel")
    for job in client.get("/v1/jobs").json():
        wait_state(client, job["id"], {"SUCCEEDED", "FAILED", "CANCELLED", "LOST"})
    for gpu in client.get("/v1/gpus").json():
        if gpu["health"] in ("quarantined", "cordoned"):
            client.post(f"/v1/gpus/{gpu['uuid']}/uncordon")
    fake.state.clear()
    fake.state.update(pristine)
    fake.write()


def container_pid(docker: Any, job: dict[str, Any]) -> int:
    return int(docker.api.inspect_container(job["container"])["State"]["Pid"])


def gpu_index(fake: FakeNvml, uuid: str) -> int:
    return next(i for i, g in enumerate(fake.state["gpus"]) if g["uuid"] == uuid)


def events(api: httpx.Client, kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = api.get("/v1/events", params={"type": kind}).json()["events"]
    return found


def test_bad_input_gets_a_clear_422_and_nothing_is_stored(api: httpx.Client) -> None:
    share = {**SLEEP, "gpus": 1, "gpu_memory": "4GiB"}
    bad = [
        ({**share, "env": {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=80G"}}, "env", "MPS limits"),
        ({**SLEEP, "env": {"NVIDIA_VISIBLE_DEVICES": "all"}}, "env", "reserved for gpudock"),
        ({**SLEEP, "env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env", "gpudock sets which GPUs"),
        ({**share, "gpu_compute": 0}, "gpu_compute", "a percentage from 1 to 100, got 0"),
        ({**share, "gpu_compute": 101}, "gpu_compute", "a percentage from 1 to 100, got 101"),
        ({**SLEEP, "gpus": 1, "gpu_compute": 50}, None, "compute share of a shared job"),
        ({**SLEEP, "mig": "5g.50gb"}, "mig", "not a profile any node's GPUs offer"),
        ({**SLEEP, "mig": "big"}, None, "is not a MIG profile name"),
        ({**SLEEP, "gpus": 2, "mig": "1g.10gb"}, None, "cannot be combined with gpus: 2"),
        ({**share, "mig": "1g.10gb"}, None, "has its own memory; leave gpu_memory out"),
        ({**share, "gpu_memory": "79.6GiB"}, "gpus", "never be scheduled"),  # past the reserve
    ]
    before = len(api.get("/v1/jobs").json())
    for spec, field, text in bad:
        response = api.post("/v1/jobs", json=spec)
        assert response.status_code == 422, (spec, response.text)
        body = response.json()["error"]
        assert text in body["message"], (spec, body)
        assert field is None or body["field"] == field, (spec, body)
    assert len(api.get("/v1/jobs").json()) == before
    fits = submit(api, **{**share, "gpu_memory": "79.5GiB", "command": ["true"]})
    assert wait_state(api, fits, {"SUCCEEDED"})["allocation"] is None  # it fit exactly


def test_gpus_show_mig_devices_the_reserve_and_the_sharing_mode(
    api: httpx.Client, server: ServerProcess, fake: FakeNvml
) -> None:
    gpus = {g["index"]: g for g in api.get("/v1/gpus").json()}
    assert [d["profile"] for d in gpus[2]["mig_devices"]] == ["3g.40gb", "1g.10gb"]
    assert gpus[2]["mig_devices"][0]["uuid"] == fake.state["gpus"][2]["mig_devices"][0]["uuid"]
    assert {g["memory_reserved"] for g in gpus.values()} == {512 * 1024**2}
    assert (gpus[0]["brand"], gpus[0]["arch"]) == ("nvidia", "9.0")
    assert api.get("/v1/nodes").json()[0]["gpu_sharing"] == "time-slice"
    table = server.cli("gpus").stdout
    assert "MIG 3g.40gb" in table and "2/1" in table


def test_two_shares_on_one_gpu_and_the_watchdog_stops_only_the_offender(
    api: httpx.Client, docker: Any, fake: FakeNvml, server: ServerProcess
) -> None:
    keeps, offends = (submit(api, **SLEEP, gpus=1, gpu_memory="4GiB") for _ in range(2))
    kept, offender = (wait_state(api, j, {"RUNNING"}) for j in (keeps, offends))
    assert kept["gpus"] == offender["gpus"], "best fit puts both shares on one GPU"
    assert kept["gpu_layers"] == ["watchdog", "hints"]
    gpu = kept["gpus"][0]
    stray = subprocess.Popen(["sleep", "300"])  # a process of no job on their GPU
    try:
        offender_pid = container_pid(docker, offender)
        fake.state["gpus"][gpu_index(fake, gpu)]["processes"] = [
            {"pid": container_pid(docker, kept), "usedGpuMemory": 3 * GIB},
            {"pid": offender_pid, "usedGpuMemory": 6 * GIB + 100 * 1024**2},
            {"pid": stray.pid, "usedGpuMemory": GIB},
        ]
        fake.write()

        failed = wait_state(api, offends, {"FAILED"}, timeout=30)

        assert failed["reason"] == (
            f"GPU memory limit exceeded: used 6.1 GiB of 4.0 GiB on {gpu} (pid {offender_pid})"
        )
        assert job_state(api, keeps)["state"] == "RUNNING"
        assert docker.api.inspect_container(kept["container"])["State"]["Running"]
        [kill] = [e for e in events(api, "job.watchdog_kill") if e["job"] == offends]
        assert (kill["payload"]["limit"], kill["payload"]["pid"]) == (4 * GIB, offender_pid)
        strays = wait_for(lambda: events(api, "gpu.stray_process"), 10, "a stray event")
        assert [(e["payload"]["pid"], e["payload"]["killed"]) for e in strays] == [
            (stray.pid, False)
        ]
        assert stray.poll() is None  # reported, not killed: the config does not say so
        assert "memory limit  watchdog (stopped past it)" in server.cli("show", str(keeps)).stdout
    finally:
        stray.kill()
        stray.wait()


def test_a_fatal_xid_quarantines_the_gpu_and_requeues_its_job(
    api: httpx.Client, fake: FakeNvml, server: ServerProcess
) -> None:
    job = submit(api, **SLEEP, gpus=1)
    gpu = wait_state(api, job, {"RUNNING"})["gpus"][0]
    add_event(fake.state, gpu_index(fake, gpu), "xid", 48)
    fake.write()

    requeued = wait_for(
        lambda: (j := job_state(api, job))["attempt"] == 1 and j, 30, "the job requeued"
    )

    events_of_job = api.get(f"/v1/jobs/{job}").json()["events"]
    why = (
        f"its GPU was quarantined: XID 48 (double bit ECC error) on {gpu}; requeued, no retry used"
    )
    assert why in [e["reason"] for e in events_of_job]
    assert requeued["gpus"] != [gpu] or requeued["state"] == "PENDING"
    health = {g["uuid"]: g for g in api.get("/v1/gpus").json()}[gpu]
    assert health["health"] == "quarantined"
    assert health["health_reason"] == "XID 48 (double bit ECC error); needs a GPU reset"
    assert [e["payload"]["class"] for e in events(api, "gpu.fault")][-1:] == ["gpu_reset"]
    assert "quarantined: XID 48" in server.cli("gpus").stdout

    back = server.cli("gpu", "uncordon", gpu).stdout
    assert back.strip().endswith("is ok")
    again = server.cli("gpu", "uncordon", gpu, check=False)
    assert again.returncode == 1 and "is ok, not cordoned: it is in service" in again.stderr


def test_cordon_is_for_admins_and_twice_is_a_conflict(
    api: httpx.Client, server: ServerProcess
) -> None:
    gpu = api.get("/v1/gpus").json()[0]["uuid"]
    user = api.post("/v1/tokens", json={"user": "ann"}).json()["token"]
    refused = server.api(user).post(f"/v1/gpus/{gpu}/cordon", json={})
    assert refused.status_code == 403 and "only an admin" in refused.text

    out = server.cli("gpu", "cordon", gpu, "--reason", "fan noise").stdout
    assert out.strip().endswith("is cordoned: cordoned by admin: fan noise")
    twice = api.post(f"/v1/gpus/{gpu}/cordon", json={})
    assert twice.status_code == 409 and "already cordoned" in twice.text
    assert api.post("/v1/gpus/GPU-nope/cordon", json={}).status_code == 404


def test_mig_plan_prints_the_commands_and_changes_nothing(
    api: httpx.Client, server: ServerProcess
) -> None:
    before = api.get("/v1/gpus").json()
    out = server.cli("mig", "plan", "--want", "1g.10gb=3", "--want", "7g.80gb=1").stdout

    assert "1 x 1g.10gb: served by idle MIG devices that exist" in out
    assert "nvidia-smi -i 0 -mig 1" in out and "nvidia-smi mig -i 0 -cgi 7g.80gb -C" in out
    assert "nvidia-smi mig -i 1 -cgi 1g.10gb,1g.10gb -C" in out
    assert api.get("/v1/gpus").json() == before
    bad = server.cli("mig", "plan", "--want", "1g.10gb", check=False)
    assert bad.returncode == 2 and "must be PROFILE=COUNT" in bad.stderr
    assert "no MIG demand" in server.cli("mig", "plan").stdout


def test_a_mig_job_gets_its_mig_device_and_gives_it_back(
    api: httpx.Client, docker: Any, fake: FakeNvml, server: ServerProcess
) -> None:
    small = fake.state["gpus"][2]["mig_devices"][1]["uuid"]  # the only 1g.10gb
    job = submit(api, **SLEEP, mig="1g.10gb")
    running = wait_state(api, job, {"RUNNING"})
    assert running["gpus"] == [small] and running["gpu_layers"] == ["mig"]
    host = docker.api.inspect_container(running["container"])["HostConfig"]
    env = docker.api.inspect_container(running["container"])["Config"]["Env"]
    requests = host.get("DeviceRequests") or []
    assert f"NVIDIA_VISIBLE_DEVICES={small}" in env
    assert [r["DeviceIDs"] for r in requests] == [[small]]  # real (stand-in) GPUs: a request
    second = submit(api, **SLEEP, mig="1g.10gb")
    reasons = wait_for(lambda: job_state(api, second)["pending_reasons"], 10, "a pending reason")
    assert reasons[0]["message"] == "needs mig 1g.10gb; node " + running["node"] + (
        " has 1 free 3g.40gb"
    )
    devices = {d["uuid"]: d for g in api.get("/v1/gpus").json() for d in g["mig_devices"]}
    assert devices[small]["job"] == job
    shown = server.cli("show", str(job)).stdout
    assert "one 1g.10gb device" in shown and "MIG (the hardware's partition)" in shown

    api.post(f"/v1/jobs/{job}/cancel")

    assert wait_state(api, second, {"RUNNING"})["gpus"] == [small]  # given back, taken again


def test_a_preempted_mig_job_gives_its_device_to_the_preemptor(
    api: httpx.Client, fake: FakeNvml
) -> None:
    large = fake.state["gpus"][2]["mig_devices"][0]["uuid"]  # the only 3g.40gb
    victim = submit(api, **SLEEP, mig="3g.40gb")
    assert wait_state(api, victim, {"RUNNING"})["gpus"] == [large]

    urgent = submit(api, **SLEEP, mig="3g.40gb", priority_class="urgent")

    assert wait_state(api, urgent, {"RUNNING"}, timeout=60)["gpus"] == [large]
    requeued = job_state(api, victim)
    assert requeued["state"] == "PENDING" and requeued["attempt"] >= 1
    (preempted,) = [e for e in events(api, "job.preempted") if e["job"] == victim]
    assert preempted["payload"]["preemptor"] == urgent


# (whole GPUs, share in GiB, MIG profile): whole and MIG jobs and shares, mixed
STREAM: list[tuple[int, int | None, str | None]] = [
    (1, None, "1g.10gb"),
    (1, 20, None),
    (1, None, None),
    (1, None, "3g.40gb"),
    (1, 40, None),
    (1, None, "1g.10gb"),  # its one device is taken: waits
    (1, 10, None),
    (1, None, None),  # no idle GPU is left: waits
]


def test_the_simulator_places_mig_jobs_and_shares_like_the_server(
    api: httpx.Client, tmp_path: Any
) -> None:
    gpus = api.get("/v1/gpus").json()
    index = {g["uuid"]: (g["index"],) for g in gpus}
    index.update({d["uuid"]: (g["index"], d["slot"]) for g in gpus for d in g["mig_devices"]})
    live: list[tuple[int, ...] | None] = []
    for whole, share, mig in STREAM:
        spec: dict[str, Any] = {**SLEEP, "gpus": whole}
        if share is not None:
            spec["gpu_memory"] = f"{share}GiB"
        if mig is not None:
            spec = {**SLEEP, "mig": mig}
        job = submit(api, **spec)
        state = wait_settled(api, job)
        live.append(index[state["gpus"][0]] if state["state"] == "RUNNING" else None)

    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes: [{count: 1, gpus: 3, model: NVIDIA-H100-80GB-HBM3, gpu_memory: 80GiB,"
        " mig: [3g.40gb, 1g.10gb], mig_gpus: 1}]\n"
    )
    jobs = [
        TraceJob(
            job_id=str(i),
            submit_time=float(i),
            duration=1e9,
            num_gpus=whole,
            gpu_fraction=None if share is None else share / 80,
            mig=mig,
        )
        for i, (whole, share, mig) in enumerate(STREAM)
    ]
    sim = Simulator(jobs, parse_cluster(str(cluster)), POLICIES["priority"])
    run = sim.run()
    placed, migs = sim.first_placements(), sim.first_migs()
    started = {r.job_id for r in run.jobs if r.start is not None and r.start < len(STREAM)}
    simulated: list[tuple[int, ...] | None] = []
    for i in range(len(STREAM)):
        if str(i) not in started:
            simulated.append(None)
        elif str(i) in migs:  # node-0000-gpu2-mig1: GPU 2, slot 1
            gpu, slot = migs[str(i)].rsplit("-gpu", 1)[1].split("-mig")
            simulated.append((int(gpu), int(slot)))
        else:
            simulated.append(placed[str(i)])
    assert simulated == live
    assert live.count(None) == 2 and (2, 1) in live and (2, 0) in live


def test_a_fatal_xid_on_a_mig_gpu_requeues_its_mig_job(api: httpx.Client, fake: FakeNvml) -> None:
    job = submit(api, **SLEEP, mig="3g.40gb")
    node = wait_state(api, job, {"RUNNING"})["node"]
    add_event(fake.state, 2, "xid", 48)  # GPU 2 holds the MIG devices
    fake.write()

    requeued = wait_for(
        lambda: (j := job_state(api, job))["attempt"] == 1 and j["pending_reasons"] and j,
        30,
        "the MIG job requeued, waiting",
    )

    assert requeued["state"] == "PENDING"  # its GPU is quarantined: no device of it is free
    assert requeued["pending_reasons"][0]["message"] == (
        f"needs mig 3g.40gb; node {node} has no free MIG device"
    )


@pytest.fixture(scope="module")
def cuda_image(docker: Any) -> Iterator[str]:
    """The test image with ``NVIDIA_REQUIRE_CUDA=cuda>=12.8`` (the stand-in's driver
    supports 12.4), built here and removed after."""
    tag = f"gpudock-test/cuda-require:{uuid.uuid4().hex[:8]}"
    require = "cuda>=12.8 brand=tesla,driver>=470,driver<471"
    dockerfile = f'FROM {TEST_IMAGE}\nENV NVIDIA_REQUIRE_CUDA="{require}"\n'
    docker.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, pull=False, rm=True)
    yield tag
    docker.images.remove(tag, force=True)


def test_what_no_node_can_run_is_refused_at_submit_saying_why(
    api: httpx.Client, cuda_image: str, server: ServerProcess
) -> None:
    node = api.get("/v1/nodes").json()[0]["name"]
    before = len(api.get("/v1/jobs").json())
    computed = {**SLEEP, "gpus": 1, "gpu_memory": "4GiB", "gpu_compute": 50}
    refused = api.post("/v1/jobs", json=computed)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == "gpu_compute"
    assert error["message"] == (
        f"job can never be scheduled: node {node} time-slices its GPUs (executor.sharing: "
        "time-slice), which cannot hold a job to a compute share: gpu_compute needs MPS"
    )
    old_driver = api.post("/v1/jobs", json={**SLEEP, "image": cuda_image, "gpus": 1})
    assert old_driver.status_code == 422, old_driver.text
    error = old_driver.json()["error"]
    assert error["field"] == "image"
    assert error["message"] == (
        f"job can never be scheduled: image needs CUDA ≥ 12.8; node {node} driver supports 12.4"
    )
    assert len(api.get("/v1/jobs").json()) == before  # nothing stored
    cpu_only = submit(api, **{**SLEEP, "image": cuda_image, "command": ["true"]})
    assert wait_state(api, cpu_only, {"SUCCEEDED"})  # no GPU: the toolkit checks nothing
    own = {"NVIDIA_REQUIRE_CUDA": "cuda>=12.0"}  # the job's env overrides the image's
    fits = submit(api, **{**SLEEP, "image": cuda_image, "gpus": 1, "env": own, "command": ["true"]})
    assert wait_state(api, fits, {"SUCCEEDED"})


def test_an_old_driver_blocks_placement_with_both_versions(
    make_server: Any, tmp_path_factory: pytest.TempPathFactory, cuda_image: str
) -> None:
    fake = make_fake_nvml(tmp_path_factory.mktemp("nvml-pending"))
    fake.state["gpus"] = [fake_gpu(0)]
    fake.write()
    env = {"LD_LIBRARY_PATH": str(fake.lib_dir), "GPUDOCK_FAKE_NVML_STATE": str(fake.state_path)}
    config = {**CONFIG, "scheduler": {"never_fits": "pending"}}  # a Swarm's: nodes may join
    api = make_server(emulate=None, config=config, env=env).start().api()
    node = api.get("/v1/nodes").json()[0]["name"]
    job = submit(api, **{**SLEEP, "image": cuda_image, "gpus": 1})
    reasons = wait_for(lambda: job_state(api, job)["pending_reasons"], 30, "a pending reason")
    assert [(r["layer"], r["message"]) for r in reasons] == [
        ("constraints", f"image needs CUDA ≥ 12.8; node {node} driver supports 12.4")
    ]
