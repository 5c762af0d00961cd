"""DockerExecutor against a real dockerd with the stand-in NVIDIA hook.

The default engine runs ``tests/kit/fake_gpu_hook`` as its NVIDIA prestart hook,
so device requests take Docker's real code path; a spare engine without the hook
plays a machine without the NVIDIA container toolkit.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.kit.docker import (
    TEST_IMAGE,
    cleanup_containers,
    docker_client,
    hook_log_entries,
    require_gpu_hook,
    unique_instance_id,
)

from gpudock.config import ExecutorConfig
from gpudock.core.job import Mount, container_name
from gpudock.executors._docker_spec import build_create_spec
from gpudock.executors.base import (
    ContainerState,
    ContainerStatus,
    ExecutorUnavailable,
    LaunchError,
    LaunchRequest,
)
from gpudock.executors.docker import DockerExecutor

pytestmark = pytest.mark.docker

GPU_A = "GPU-11111111-2222-3333-4444-555555555555"
GPU_B = "GPU-66666666-7777-8888-9999-000000000000"
MiB = 1024 * 1024


def make_request(
    command: list[str] | None = None, *, job_id: int | None = None, **fields: Any
) -> LaunchRequest:
    """A launch request for a fresh job id (so parallel runs never share a name)."""
    job_id = job_id if job_id is not None else random.randrange(10**8, 10**9)
    attempt = fields.pop("attempt", 0)
    return LaunchRequest(
        job_id=job_id,
        attempt=attempt,
        name=container_name("exectest", job_id, attempt),
        image=fields.pop("image", TEST_IMAGE),
        command=command if command is not None else ["sleep", "300"],
        env=fields.pop("env", {}),
        gpu_uuids=fields.pop("gpu_uuids", ()),
        **fields,
    )


def wait_exit(api: Any, name_or_id: str, timeout: float = 30) -> None:
    api.api.wait(name_or_id, timeout=timeout)


def container_env(api: Any, name_or_id: str) -> list[str]:
    env: list[str] = api.api.inspect_container(name_or_id)["Config"]["Env"]
    return env


@pytest.fixture
def executor(docker_api: Any, instance_id: str) -> Iterator[DockerExecutor]:
    ex = DockerExecutor(ExecutorConfig(), instance_id)
    yield ex
    ex.close()


@pytest.fixture
def hooked(docker_api: Any) -> None:
    require_gpu_hook(docker_api)


# --------------------------------------------------------------------------- GPUs


@pytest.mark.usefixtures("hooked")
def test_container_gets_exactly_the_allocated_gpus(
    executor: DockerExecutor, docker_api: Any
) -> None:
    since = time.time()
    request = make_request(["env"], gpu_uuids=(GPU_A, GPU_B), gpus_emulated=True)
    status = executor.launch(request)
    wait_exit(docker_api, status.id)

    logged = [e for e in hook_log_entries(since) if e["container_id"] == status.id]
    assert len(logged) == 1
    assert logged[0]["nvidia_visible_devices"] == f"{GPU_A},{GPU_B}"
    assert logged[0]["gpudock_gpus"] == f"{GPU_A},{GPU_B}"
    assert logged[0]["gpudock_job_id"] == str(request.job_id)
    output = b"".join(executor.logs(status.id)).decode()
    assert f"NVIDIA_VISIBLE_DEVICES={GPU_A},{GPU_B}\n" in output
    assert f"GPUDOCK_GPUS={GPU_A},{GPU_B}\n" in output
    assert "GPUDOCK_GPU_MEMORY_MB" not in output
    (device_request,) = docker_api.api.inspect_container(status.id)["HostConfig"]["DeviceRequests"]
    assert device_request["DeviceIDs"] == [GPU_A, GPU_B]
    assert device_request["Count"] == 0
    assert device_request["Capabilities"] == [["gpu"]]
    assert executor.gpu_mode == "device-request"


@pytest.mark.usefixtures("hooked")
def test_shared_job_gets_its_memory_share(executor: DockerExecutor, docker_api: Any) -> None:
    request = make_request(["env"], gpu_uuids=(GPU_A,), gpu_memory=20 * 1024 * MiB)
    status = executor.launch(request)
    wait_exit(docker_api, status.id)
    output = b"".join(executor.logs(status.id)).decode()
    assert "GPUDOCK_GPU_MEMORY_MB=20480\n" in output
    assert f"NVIDIA_VISIBLE_DEVICES={GPU_A}\n" in output


def test_cpu_job_gets_no_gpu(executor: DockerExecutor, docker_api: Any) -> None:
    since = time.time()
    status = executor.launch(make_request(["env"]))
    wait_exit(docker_api, status.id)
    assert docker_api.api.inspect_container(status.id)["HostConfig"]["DeviceRequests"] is None
    assert not [e for e in hook_log_entries(since) if e["container_id"] == status.id]
    env = container_env(docker_api, status.id)
    assert "GPUDOCK_GPUS=" in env
    assert [v for v in env if v.startswith("NVIDIA_VISIBLE_DEVICES=")] == [
        "NVIDIA_VISIBLE_DEVICES=void"
    ]


def test_env_mode_sets_visible_devices_without_device_request(
    docker_api: Any, instance_id: str
) -> None:
    since = time.time()
    executor = DockerExecutor(ExecutorConfig(gpu_mode="env"), instance_id)
    status = executor.launch(make_request(["true"], gpu_uuids=(GPU_B,), gpus_emulated=True))
    wait_exit(docker_api, status.id)
    assert docker_api.api.inspect_container(status.id)["HostConfig"]["DeviceRequests"] is None
    assert f"NVIDIA_VISIBLE_DEVICES={GPU_B}" in container_env(docker_api, status.id)
    assert not [e for e in hook_log_entries(since) if e["container_id"] == status.id]


@pytest.mark.usefixtures("hooked")
def test_hook_failure_is_a_launch_error_and_leaves_nothing(executor: DockerExecutor) -> None:
    request = make_request(gpu_uuids=("GPU-FAIL-0",), gpus_emulated=True)
    with pytest.raises(LaunchError, match="failing on demand") as info:
        executor.launch(request)
    assert "OCI runtime" not in str(info.value)  # shortened to the useful part
    assert executor.inspect(request.name) is None
    assert executor.list_containers() == []


# ------------------------------------------------------- fallback without the toolkit


@pytest.fixture
def nohook_executor(nohook_docker_url: str) -> Iterator[DockerExecutor]:
    ex = DockerExecutor(ExecutorConfig(docker_url=nohook_docker_url), unique_instance_id())
    yield ex
    cleanup_containers(ex._docker(), f"gpudock.instance={ex.instance_id}")
    ex.close()


def test_auto_mode_falls_back_to_env_for_emulated_gpus(
    nohook_executor: DockerExecutor, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gpudock.executors.docker")
    first = nohook_executor.launch(
        make_request(["env"], gpu_uuids=(GPU_A, GPU_B), gpus_emulated=True)
    )
    second = nohook_executor.launch(make_request(["env"], gpu_uuids=(GPU_B,), gpus_emulated=True))

    assert nohook_executor.gpu_mode == "env"
    warnings = [r for r in caplog.records if r.name == "gpudock.executors.docker"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "NVIDIA_VISIBLE_DEVICES" in warnings[0].getMessage()
    client = nohook_executor._docker()
    wait_exit(client, first.id)
    wait_exit(client, second.id)
    assert (
        f"NVIDIA_VISIBLE_DEVICES={GPU_A},{GPU_B}\n"
        in b"".join(nohook_executor.logs(first.id)).decode()
    )
    assert {c.id for c in nohook_executor.list_containers()} == {first.id, second.id}
    assert client.api.inspect_container(first.id)["HostConfig"]["DeviceRequests"] is None
    real = make_request(gpu_uuids=(GPU_A,), gpus_emulated=False)
    with pytest.raises(LaunchError, match="NVIDIA container toolkit is missing"):
        nohook_executor.launch(real)  # real GPUs never fall back to env-only
    assert nohook_executor.inspect(real.name) is None


def test_real_gpus_without_toolkit_are_a_clear_launch_error(
    nohook_executor: DockerExecutor,
) -> None:
    request = make_request(gpu_uuids=(GPU_A,), gpus_emulated=False)
    with pytest.raises(LaunchError, match="NVIDIA container toolkit is missing"):
        nohook_executor.launch(request)
    assert nohook_executor.gpu_mode == "device-request"
    assert nohook_executor.list_containers() == []


def test_device_request_mode_never_falls_back(nohook_docker_url: str) -> None:
    config = ExecutorConfig(docker_url=nohook_docker_url, gpu_mode="device-request")
    executor = DockerExecutor(config, unique_instance_id())
    with pytest.raises(LaunchError, match="no NVIDIA device driver"):
        executor.launch(make_request(gpu_uuids=(GPU_A,), gpus_emulated=True))
    assert executor.list_containers() == []
    assert executor.gpu_mode == "device-request"


# ------------------------------------------------------------------- hardening


def test_hardened_defaults_are_applied(executor: DockerExecutor, docker_api: Any) -> None:
    request = make_request(
        ["sh", "-c", "grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; sleep 300"],
        cpus=0.5,
        memory=64 * MiB,
        shm_size=16 * MiB,
    )
    status = executor.launch(request)
    host = docker_api.api.inspect_container(status.id)["HostConfig"]
    assert host["CapDrop"] == ["ALL"]
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["Init"] is True
    assert host["PidsLimit"] == 4096
    assert host["Privileged"] is False
    assert host["ReadonlyRootfs"] is False
    assert host["Memory"] == 64 * MiB
    assert host["NanoCpus"] == 500_000_000
    assert host["ShmSize"] == 16 * MiB
    output = _wait_for_output(executor, status.id, b"NoNewPrivs")
    assert b"CapEff:\t0000000000000000" in output  # enforced, not just recorded
    assert b"NoNewPrivs:\t1" in output


def test_config_defaults_and_relaxations(docker_api: Any, instance_id: str) -> None:
    config = ExecutorConfig(
        cap_add=["NET_BIND_SERVICE"],
        read_only_rootfs=True,
        default_cpus=1.5,
        default_memory=128 * MiB,
        pids_limit=64,
    )
    status = DockerExecutor(config, instance_id).launch(
        make_request(["sh", "-c", "touch /x 2>/dev/null && echo writable || echo read-only"])
    )
    host = docker_api.api.inspect_container(status.id)["HostConfig"]
    assert (host["CapAdd"], host["ReadonlyRootfs"], host["PidsLimit"]) == (
        ["NET_BIND_SERVICE"],
        True,
        64,
    )
    assert (host["NanoCpus"], host["Memory"]) == (1_500_000_000, 128 * MiB)
    wait_exit(docker_api, status.id)
    assert docker_api.api.logs(status.id) == b"read-only\n"


def test_out_of_memory_is_reported(executor: DockerExecutor, docker_api: Any) -> None:
    status = executor.launch(make_request(["tail", "/dev/zero"], memory=16 * MiB))
    wait_exit(docker_api, status.id, timeout=60)
    final = executor.inspect(status.id)
    assert final is not None
    assert (final.state, final.exit_code, final.oom_killed) == (ContainerState.EXITED, 137, True)


def test_allowed_mount_is_bound_and_others_are_refused(
    docker_api: Any, instance_id: str, tmp_path: Path
) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "hello.txt").write_text("hi\n")
    executor = DockerExecutor(ExecutorConfig(allowed_mounts=[str(tmp_path / "data")]), instance_id)
    ok = make_request(
        ["sh", "-c", "cat /in/hello.txt; touch /in/x 2>/dev/null || echo ro"],
        mounts=(Mount(host=str(tmp_path / "data"), container="/in", read_only=True),),
    )
    status = executor.launch(ok)
    wait_exit(docker_api, status.id)
    assert b"".join(executor.logs(status.id)) == b"hi\nro\n"

    escape = Mount(host=f"{tmp_path}/data/../../etc", container="/etc2", read_only=True)
    sibling = Mount(host=f"{tmp_path}/database", container="/db", read_only=False)
    for mount in (escape, sibling):
        request = make_request(mounts=(mount,))
        with pytest.raises(
            LaunchError, match=r"refused: host path \S+ is not in the admin allowlist"
        ):
            executor.launch(request)
        assert executor.inspect(request.name) is None


# ---------------------------------------------------------------- idempotency


def test_launch_twice_gives_one_container(executor: DockerExecutor) -> None:
    request = make_request()
    first = executor.launch(request)
    second = executor.launch(request)
    assert first.id == second.id
    assert second.state is ContainerState.RUNNING
    assert [c.id for c in executor.list_containers()] == [first.id]


@pytest.mark.parametrize("fresh", [False, True], ids=["look-first", "create-first"])
def test_concurrent_launches_race_to_one_container(executor: DockerExecutor, fresh: bool) -> None:
    request = replace(make_request(), fresh=fresh)
    results: list[ContainerStatus | BaseException] = []

    def launch() -> None:
        try:
            results.append(executor.launch(request))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=launch) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(isinstance(r, ContainerStatus) for r in results), results
    assert len({r.id for r in results if isinstance(r, ContainerStatus)}) == 1
    assert len(executor.list_containers()) == 1


@pytest.mark.parametrize("fresh", [False, True], ids=["look-first", "create-first"])
def test_created_container_is_adopted_and_started(
    executor: DockerExecutor, docker_api: Any, instance_id: str, fresh: bool
) -> None:
    """A crash between create and start leaves a created container; launch starts it (even
    a launch told the name is fresh: its create finds the name taken and adopts)."""
    request = replace(make_request(), fresh=fresh)
    spec = build_create_spec(request, executor.config, instance_id, device_request=False)
    host_config = docker_api.api.create_host_config(**spec.host)
    created = docker_api.api.create_container(host_config=host_config, **spec.container)
    status = executor.launch(request)
    assert status.id == created["Id"]
    assert status.state is ContainerState.RUNNING


def test_foreign_container_with_the_name_is_left_alone(
    executor: DockerExecutor, docker_api: Any
) -> None:
    request = make_request()
    foreign = docker_api.containers.create(TEST_IMAGE, ["true"], name=request.name)
    try:
        with pytest.raises(LaunchError, match="left untouched"):
            executor.launch(request)
        assert docker_api.api.inspect_container(foreign.id)["State"]["Status"] == "created"
    finally:
        foreign.remove(force=True)


# ---------------------------------------------------------------- launch errors


@pytest.mark.parametrize(
    "image",
    [
        "localhost:1/gpudock/missing:latest",  # registry refuses the connection
        "gpudock-test/definitely-missing:v0",  # Docker Hub: unresolvable here, 404 elsewhere
    ],
)
def test_missing_image_is_a_launch_error(executor: DockerExecutor, image: str) -> None:
    request = make_request(image=image)
    with pytest.raises(LaunchError, match=r"is not present and could not be pulled: .+"):
        executor.launch(request)
    assert executor.inspect(request.name) is None


def test_pull_that_hangs_is_cut_off_by_pull_timeout(docker_api: Any, instance_id: str) -> None:
    """A registry that accepts connections and never answers: bounded by pull_timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        executor = DockerExecutor(ExecutorConfig(pull_timeout=1), instance_id)
        request = make_request(image=f"localhost:{port}/gpudock/slow:latest")
        started = time.monotonic()
        with pytest.raises(LaunchError, match=r"could not be pulled: no result within 1s"):
            executor.launch(request)
        assert time.monotonic() - started < 5
    assert executor.inspect(request.name) is None


def test_missing_executable_without_init_is_a_launch_error(
    docker_api: Any, instance_id: str
) -> None:
    executor = DockerExecutor(ExecutorConfig(init=False), instance_id)
    request = make_request(["no-such-program"])
    with pytest.raises(LaunchError, match="executable file not found") as info:
        executor.launch(request)
    assert "shim" not in str(info.value)
    assert executor.inspect(request.name) is None


def test_missing_executable_under_init_is_exit_127(
    executor: DockerExecutor, docker_api: Any
) -> None:
    """With --init (the default) Docker starts tini, which then fails to exec: a job failure."""
    status = executor.launch(make_request(["no-such-program"]))
    wait_exit(docker_api, status.id)
    final = executor.inspect(status.id)
    assert final is not None and final.exit_code == 127
    assert b"exec no-such-program failed" in b"".join(executor.logs(status.id))


def test_unreachable_engine_is_unavailable(tmp_path: Path) -> None:
    config = ExecutorConfig(docker_url=f"unix://{tmp_path}/nothing.sock")
    executor = DockerExecutor(config, unique_instance_id())
    with pytest.raises(ExecutorUnavailable):
        executor.ping()
    with pytest.raises(ExecutorUnavailable):
        executor.launch(make_request())
    with pytest.raises(ExecutorUnavailable):
        executor.list_containers()


# ------------------------------------------------------- status, logs, stop, list


def test_status_logs_and_exit_code(executor: DockerExecutor, docker_api: Any) -> None:
    status = executor.launch(make_request(["sh", "-c", "echo out; echo err >&2; exit 3"]))
    wait_exit(docker_api, status.id)
    final = executor.inspect(status.id)
    assert final is not None
    assert (final.state, final.exit_code, final.oom_killed) == (ContainerState.EXITED, 3, False)
    assert final.started_at is not None and final.finished_at is not None
    assert 0 <= final.finished_at - final.started_at < 30
    assert abs(final.finished_at - time.time()) < 60
    assert b"".join(executor.logs(status.id)) in (b"out\nerr\n", b"err\nout\n")
    assert executor.inspect("gpudock-no-such-container") is None
    assert list(executor.logs("gpudock-no-such-container")) == []


def test_logs_follow_until_exit(executor: DockerExecutor) -> None:
    script = "for i in 1 2 3; do echo line$i; sleep 0.2; done"
    status = executor.launch(make_request(["sh", "-c", script]))
    assert b"".join(executor.logs(status.id, follow=True)) == b"line1\nline2\nline3\n"


def test_stop_honours_the_grace_period(executor: DockerExecutor) -> None:
    polite = executor.launch(make_request(["sleep", "300"]))
    stubborn = executor.launch(
        make_request(["sh", "-c", "trap '' TERM; echo ready; sleep 300 & wait"])
    )
    _wait_for_output(executor, stubborn.id, b"ready")

    started = time.monotonic()
    executor.stop(polite.name, grace_seconds=10)
    polite_took = time.monotonic() - started
    started = time.monotonic()
    executor.stop(stubborn.name, grace_seconds=1)
    stubborn_took = time.monotonic() - started

    polite_status, stubborn_status = executor.inspect(polite.id), executor.inspect(stubborn.id)
    assert polite_status is not None and stubborn_status is not None
    assert polite_status.exit_code == 143 and polite_took < 5  # SIGTERM via --init
    assert stubborn_status.exit_code == 137 and 0.9 < stubborn_took < 8  # SIGKILL after grace
    executor.stop(polite.name, grace_seconds=1)  # already stopped: no error
    executor.remove(polite.name)
    executor.remove(polite.name)  # already gone: no error
    executor.stop(polite.name, grace_seconds=1)
    assert executor.inspect(polite.id) is None


def test_list_containers_is_scoped_to_the_instance(
    executor: DockerExecutor, docker_api: Any
) -> None:
    other = DockerExecutor(ExecutorConfig(), unique_instance_id())
    try:
        mine_running = executor.launch(make_request())
        mine_exited = executor.launch(make_request(["true"]))
        theirs = other.launch(make_request())
        wait_exit(docker_api, mine_exited.id)
        listed = {c.id: c for c in executor.list_containers()}
        assert set(listed) == {mine_running.id, mine_exited.id}
        assert listed[mine_exited.id].state is ContainerState.EXITED
        assert listed[mine_running.id].job_id is not None
        assert [c.id for c in other.list_containers()] == [theirs.id]
    finally:
        cleanup_containers(docker_api, f"gpudock.instance={other.instance_id}")


def test_labels_carry_job_attempt_and_request_labels(
    executor: DockerExecutor, docker_api: Any, instance_id: str
) -> None:
    request = make_request(attempt=2, labels={"team": "vision", "gpudock.job": "spoof"})
    status = executor.launch(request)
    labels = docker_api.api.inspect_container(status.id)["Config"]["Labels"]
    assert labels["gpudock.job"] == str(request.job_id)  # ours win over the request's
    assert (labels["gpudock.attempt"], labels["gpudock.instance"]) == ("2", instance_id)
    assert labels["team"] == "vision"
    assert (status.job_id, status.attempt, status.name) == (request.job_id, 2, request.name)


def _wait_for_output(executor: DockerExecutor, container_id: str, needle: bytes) -> bytes:
    """Poll the container's logs until they contain ``needle``; at most 10 s."""
    deadline = time.monotonic() + 10
    while True:
        output = b"".join(executor.logs(container_id))
        if needle in output:
            return output
        assert time.monotonic() < deadline, output
        time.sleep(0.05)


def test_docker_client_helper_answers() -> None:
    client = docker_client()
    assert client.ping()
    client.close()
