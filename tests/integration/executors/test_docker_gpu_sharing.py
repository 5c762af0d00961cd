"""What a shared job's container gets on the real dockerd: its limits, MPS, image needs.

The stand-in NVIDIA hook logs each GPU container's env as runc hands it over,
so the checks read what the container process really starts with.
"""

from __future__ import annotations

import io
import random
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import TEST_IMAGE, hook_log_entries, require_gpu_hook

from gpudock.config import ExecutorConfig
from gpudock.core.job import container_name
from gpudock.executors.base import LaunchRequest
from gpudock.executors.docker import DockerExecutor
from gpudock.gpus.mps import MpsSetup

pytestmark = pytest.mark.docker

GiB = 1024**3
GPU_A = "GPU-11111111-2222-3333-4444-555555555555"
GPU_B = "GPU-66666666-7777-8888-9999-000000000000"


def make_request(command: list[str], **fields: Any) -> LaunchRequest:
    """A launch request for a fresh job id (so parallel runs never share a name)."""
    job_id = random.randrange(10**8, 10**9)
    return LaunchRequest(
        job_id=job_id,
        attempt=0,
        name=container_name("sharetest", job_id, 0),
        image=TEST_IMAGE,
        command=command,
        env=fields.pop("env", {}),
        gpu_uuids=fields.pop("gpu_uuids", ()),
        **fields,
    )


def wait_exit(api: Any, container: str) -> None:
    api.api.wait(container, timeout=30)


@pytest.fixture
def executor(docker_api: Any, instance_id: str) -> Iterator[DockerExecutor]:
    require_gpu_hook(docker_api)
    ex = DockerExecutor(ExecutorConfig(), instance_id)
    yield ex
    ex.close()


def test_two_shares_of_one_gpu_get_its_uuid_each_with_its_own_limit(
    executor: DockerExecutor, docker_api: Any
) -> None:
    since = time.time()
    small = make_request(
        ["true"], gpu_uuids=(GPU_A,), gpu_memory=4 * GiB, gpu_memory_total=80 * GiB
    )
    large = make_request(
        ["true"], gpu_uuids=(GPU_A,), gpu_memory=20 * GiB, gpu_memory_total=80 * GiB
    )
    ids = [executor.launch(r).id for r in (small, large)]
    for container in ids:
        wait_exit(docker_api, container)

    env = {e["container_id"]: e["env"] for e in hook_log_entries(since) if e["container_id"] in ids}
    first, second = env[ids[0]], env[ids[1]]
    assert first["NVIDIA_VISIBLE_DEVICES"] == second["NVIDIA_VISIBLE_DEVICES"] == GPU_A
    assert (first["GPUDOCK_GPU_MEMORY_LIMIT_BYTES"], first["XLA_PYTHON_CLIENT_MEM_FRACTION"]) == (
        str(4 * GiB),
        "0.050",
    )
    assert (second["GPUDOCK_GPU_MEMORY_LIMIT_BYTES"], second["XLA_PYTHON_CLIENT_MEM_FRACTION"]) == (
        str(20 * GiB),
        "0.250",
    )
    assert first["TF_FORCE_GPU_ALLOW_GROWTH"] == second["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"


def test_mps_env_mounts_and_ipc_are_exact(
    executor: DockerExecutor, docker_api: Any, tmp_path: Path
) -> None:
    pipe, logs = tmp_path / "nvidia-mps", tmp_path / "nvidia-mps-log"
    pipe.mkdir()
    logs.mkdir()
    (pipe / "seen-by-the-job").write_text("ok")
    since = time.time()
    request = make_request(
        ["cat", f"{pipe}/seen-by-the-job"],
        gpu_uuids=(GPU_A, GPU_B),
        gpu_memory=6 * GiB,
        gpu_memory_total=80 * GiB,
        gpu_compute=40,
        mps=MpsSetup(str(pipe), str(logs)),
        env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "100"},  # stored before the policy
    )
    status = executor.launch(request)
    wait_exit(docker_api, status.id)

    attrs = docker_api.api.inspect_container(status.id)
    assert attrs["HostConfig"]["IpcMode"] == "host"
    mounts = sorted((m["Source"], m["Destination"], m["RW"]) for m in attrs["Mounts"])
    assert mounts == [(str(pipe), str(pipe), True), (str(logs), str(logs), True)]
    [logged] = [e for e in hook_log_entries(since) if e["container_id"] == status.id]
    mps = {k: v for k, v in logged["env"].items() if k.startswith("CUDA_MPS_")}
    assert mps == {
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
        "CUDA_MPS_LOG_DIRECTORY": str(logs),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=6144M,1=6144M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40",
    }
    assert b"".join(executor.logs(status.id)) == b"ok"  # the pipe directory is there


def test_whole_gpus_on_an_mps_node_run_without_mps(
    executor: DockerExecutor, docker_api: Any, tmp_path: Path
) -> None:
    request = make_request(["true"], gpu_uuids=(GPU_A,), mps=MpsSetup(str(tmp_path), str(tmp_path)))
    status = executor.launch(request)
    wait_exit(docker_api, status.id)
    attrs = docker_api.api.inspect_container(status.id)
    assert attrs["HostConfig"]["IpcMode"] != "host"
    assert not any(e.startswith("CUDA_MPS_") for e in attrs["Config"]["Env"])


@pytest.fixture
def cuda_image(docker_api: Any) -> Iterator[str]:
    """A local image whose env says ``NVIDIA_REQUIRE_CUDA`` (built without a registry)."""
    tag = f"gpudock-test/cuda-require:{uuid.uuid4().hex[:8]}"
    dockerfile = (
        f"FROM {TEST_IMAGE}\n"
        'ENV NVIDIA_REQUIRE_CUDA="cuda>=12.4 brand=tesla,driver>=470,driver<471"\n'
    ).encode()
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        tar.addfile(info, io.BytesIO(dockerfile))
    context.seek(0)
    docker_api.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    yield tag
    docker_api.images.remove(tag, force=True)


def test_an_images_cuda_requirement_is_read_and_parsed(
    executor: DockerExecutor, cuda_image: str
) -> None:
    present, needs = executor.image_requirements(cuda_image)
    assert present and needs is not None
    assert needs.min_cuda() == (12, 4)
    assert executor.image_requirements(cuda_image)[1] is needs  # cached by image id
    assert executor.image_requirements(TEST_IMAGE) == (True, None)
    assert executor.image_requirements("gpudock-test/absent:none") == (False, None)
