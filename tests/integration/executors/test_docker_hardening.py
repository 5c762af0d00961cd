"""Container defaults that protect the host, read back from the real dockerd.

Mounts bound at their resolved path (and refused at launch when a symlink
leads out), memory that means memory (no extra swap), rotated json-file
logs, a fixed non-root user, and the GPU env keys gpudock controls.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from tests.integration.executors.test_docker_executor import (
    GPU_A,
    MiB,
    container_env,
    make_request,
    wait_exit,
)
from tests.kit.docker import hook_log_entries, require_gpu_hook

from gpudock.config import ExecutorConfig
from gpudock.core.job import Mount
from gpudock.executors._docker_spec import build_create_spec
from gpudock.executors.base import LaunchError
from gpudock.executors.docker import DockerExecutor
from gpudock.executors.mount_staging import MountStager

pytestmark = pytest.mark.docker


def executor_with(instance_id: str, **config: Any) -> DockerExecutor:
    return DockerExecutor(ExecutorConfig.model_validate(config), instance_id)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """``scratch/`` (allowed rw) with ``work/``, and ``outside/secret`` (not allowed)."""
    root = tmp_path.resolve()
    (root / "scratch" / "work").mkdir(parents=True)
    (root / "outside").mkdir()
    (root / "outside" / "secret").write_text("secret\n")
    return root


# ------------------------------------------------------------------- mounts


def test_a_symlink_planted_after_the_request_is_refused_at_launch(
    docker_api: Any, instance_id: str, host: Path
) -> None:
    """The request was fine when made; by launch ``link`` points at ``/``."""
    executor = executor_with(instance_id, allowed_mounts=[f"{host}/scratch:rw"])
    (host / "scratch" / "link").mkdir()
    request = make_request(
        ["sh", "-c", f"cat /host{host}/outside/secret; touch /host{host}/outside/pwned"],
        mounts=(Mount(host=f"{host}/scratch/link", container="/host", read_only=False),),
    )
    (host / "scratch" / "link").rmdir()
    (host / "scratch" / "link").symlink_to("/")
    with pytest.raises(LaunchError, match="resolves to /, outside the admin allowlist"):
        executor.launch(request)
    assert executor.inspect(request.name) is None  # nothing was created
    assert sorted(os.listdir(host / "outside")) == ["secret"]


def test_a_created_container_whose_source_became_a_symlink_is_not_started(
    docker_api: Any, instance_id: str, host: Path
) -> None:
    """A crash (or a long pull) between create and start: the source is checked again."""
    executor = executor_with(instance_id, allowed_mounts=[f"{host}/scratch:rw"])
    (host / "scratch" / "later").mkdir()
    request = make_request(
        ["touch", f"/host{host}/outside/pwned"],
        mounts=(Mount(host=f"{host}/scratch/later", container="/host", read_only=False),),
    )
    spec = build_create_spec(request, executor.config, instance_id, device_request=False)
    host_config = docker_api.api.create_host_config(**spec.host)
    docker_api.api.create_container(host_config=host_config, **spec.container)
    (host / "scratch" / "later").rmdir()
    (host / "scratch" / "later").symlink_to("/")
    with pytest.raises(LaunchError, match=r"refused before start: .+ resolves to /, outside"):
        executor.launch(request)
    assert executor.inspect(request.name) is None  # removed, never started
    assert sorted(os.listdir(host / "outside")) == ["secret"]


def test_a_container_created_on_staging_of_a_crashed_launch_is_made_anew(
    docker_api: Any, instance_id: str, host: Path
) -> None:
    """A crash between create and start: that staging is gone, so the container is
    discarded and created again on fresh staging, never started on an empty folder."""
    executor = executor_with(instance_id, allowed_mounts=[f"{host}/scratch:rw"])
    (host / "scratch" / "work" / "f").write_text("real\n")
    request = make_request(
        ["cat", "/in/f"],
        mounts=(Mount(host=f"{host}/scratch/work", container="/in", read_only=True),),
    )
    stale = host / "staging" / "1.1.1.crashed" / "0"  # empty: its mount is gone
    stale.mkdir(parents=True)
    executor = DockerExecutor(executor.config, instance_id, stager=MountStager(host / "staging"))
    spec = build_create_spec(
        request, executor.config, instance_id, device_request=False, sources=[str(stale)]
    )
    host_config = docker_api.api.create_host_config(**spec.host)
    first = docker_api.api.create_container(host_config=host_config, **spec.container)["Id"]
    status = executor.launch(request)
    assert status.id != first
    wait_exit(docker_api, status.id)
    assert b"".join(executor.logs(status.id)) == b"real\n"


def test_a_symlink_inside_the_allowlist_is_bound_at_its_target(
    docker_api: Any, instance_id: str, host: Path
) -> None:
    """Bound as staged (opened, never by name) and unstaged once the container started."""
    executor = executor_with(instance_id, allowed_mounts=[f"{host}/scratch:rw"])
    (host / "scratch" / "alias").symlink_to(host / "scratch" / "work")
    status = executor.launch(
        make_request(
            ["sh", "-c", "echo hi > /out/f"],
            mounts=(Mount(host=f"{host}/scratch/alias", container="/out", read_only=False),),
        )
    )
    wait_exit(docker_api, status.id)
    (mount,) = docker_api.api.inspect_container(status.id)["Mounts"]
    assert mount["RW"] is True
    assert executor._binds.is_staged(mount["Source"])
    assert not os.path.exists(mount["Source"])  # released after the start
    assert (host / "scratch" / "work" / "f").read_text() == "hi\n"


def test_a_symlink_inside_the_mounted_folder_that_points_within_it_works(
    docker_api: Any, instance_id: str, host: Path
) -> None:
    data = host / "scratch" / "work"
    (data / "real").mkdir()
    (data / "real" / "f").write_text("through the link\n")
    (data / "link").symlink_to("real")
    executor = executor_with(instance_id, allowed_mounts=[f"{host}/scratch:rw"])
    status = executor.launch(
        make_request(
            ["cat", "/in/link/f"],
            mounts=(Mount(host=str(data), container="/in", read_only=True),),
        )
    )
    wait_exit(docker_api, status.id)
    assert b"".join(executor.logs(status.id)) == b"through the link\n"


def test_without_staging_folders_jobs_can_write_are_refused_and_ro_entries_still_work(
    docker_api: Any, instance_id: str, host: Path, tmp_path: Path
) -> None:
    """A host where mounts cannot be staged (here: a staging folder gpudock does not own)."""
    (tmp_path / "staging").mkdir()
    os.chown(tmp_path / "staging", 65534, 65534)
    (host / "data").mkdir()
    (host / "data" / "f").write_text("read-only data\n")
    config = ExecutorConfig.model_validate(
        {"allowed_mounts": [f"{host}/scratch:rw", f"{host}/data"]}
    )
    executor = DockerExecutor(config, instance_id, stager=MountStager(tmp_path / "staging"))
    problem = executor.mount_problem()
    assert problem is not None and "owned by uid 65534" in problem

    writable = make_request(
        ["true"], mounts=(Mount(host=f"{host}/scratch/work", container="/w", read_only=True),)
    )
    with pytest.raises(LaunchError, match="which jobs can write, and this server cannot bind"):
        executor.launch(writable)
    assert executor.inspect(writable.name) is None
    status = executor.launch(
        make_request(["cat", "/d/f"], mounts=(Mount(f"{host}/data", "/d", True),))
    )
    wait_exit(docker_api, status.id)
    assert b"".join(executor.logs(status.id)) == b"read-only data\n"


def test_mounts_are_read_only_unless_rw(docker_api: Any, instance_id: str, host: Path) -> None:
    executor = executor_with(instance_id, allowed_mounts=[f"{host}/scratch:rw"])
    status = executor.launch(
        make_request(
            ["sh", "-c", "touch /in/x 2>/dev/null && echo writable || echo read-only"],
            mounts=(Mount(host=f"{host}/scratch", container="/in", read_only=True),),
        )
    )
    wait_exit(docker_api, status.id)
    assert b"".join(executor.logs(status.id)) == b"read-only\n"
    assert not (host / "scratch" / "x").exists()


# ----------------------------------------------------- memory, logs and user


def test_memory_means_memory_unless_swap_is_allowed(docker_api: Any, instance_id: str) -> None:
    """Issue 29 item 7: ``memory: 64MiB`` gets ``MemorySwap`` 64 MiB, not double."""
    strict = executor_with(instance_id).launch(make_request(["true"], memory=64 * MiB))
    host = docker_api.api.inspect_container(strict.id)["HostConfig"]
    assert (host["Memory"], host["MemorySwap"]) == (64 * MiB, 64 * MiB)

    loose = executor_with(instance_id, allow_swap=True).launch(
        make_request(["true"], memory=64 * MiB)
    )
    host = docker_api.api.inspect_container(loose.id)["HostConfig"]
    assert host["Memory"] == 64 * MiB and host["MemorySwap"] != 64 * MiB  # Docker's default


def test_docker_logs_are_rotated(docker_api: Any, instance_id: str) -> None:
    default = executor_with(instance_id).launch(make_request(["true"]))
    log_config = docker_api.api.inspect_container(default.id)["HostConfig"]["LogConfig"]
    assert log_config == {
        "Type": "json-file",
        "Config": {"max-size": str(50 * MiB), "max-file": "3"},
    }
    small = executor_with(instance_id, log_max_size="1MiB", log_max_files=2)
    status = small.launch(make_request(["true"]))
    log_config = docker_api.api.inspect_container(status.id)["HostConfig"]["LogConfig"]
    assert log_config["Config"] == {"max-size": str(MiB), "max-file": "2"}


def test_a_configured_user_runs_every_container(docker_api: Any, instance_id: str) -> None:
    status = executor_with(instance_id, user="1234:5678").launch(
        make_request(["sh", "-c", "echo $(id -u):$(id -g)"])
    )
    wait_exit(docker_api, status.id)
    assert b"".join(docker_api.api.logs(status.id, stream=False).splitlines()) == b"1234:5678"


# ------------------------------------------------------------------ GPU env


def test_driver_capabilities_are_the_policy_or_the_jobs_narrower_ask(
    docker_api: Any, instance_id: str
) -> None:
    executor = executor_with(instance_id, gpu_mode="env")
    default = executor.launch(make_request(["true"], gpu_uuids=(GPU_A,), gpus_emulated=True))
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in container_env(docker_api, default.id)

    # A job stored before the policy, asking for more and for keys now refused:
    old = make_request(
        ["true"],
        gpu_uuids=(GPU_A,),
        gpus_emulated=True,
        env={
            "NVIDIA_DRIVER_CAPABILITIES": "utility,graphics",
            "CUDA_VISIBLE_DEVICES": "7",
            "NVIDIA_MIG_CONFIG_DEVICES": "all",
            "NVIDIA_REQUIRE_CUDA": "cuda>=12.0",
        },
    )
    env = container_env(docker_api, executor.launch(old).id)
    assert "NVIDIA_DRIVER_CAPABILITIES=utility" in env
    assert "NVIDIA_REQUIRE_CUDA=cuda>=12.0" in env
    assert not [e for e in env if e.startswith(("CUDA_VISIBLE_DEVICES=", "NVIDIA_MIG_"))]


def test_the_toolkit_hook_sees_the_policy_capabilities(docker_api: Any, instance_id: str) -> None:
    """With a real device request, the NVIDIA hook reads the capabilities gpudock set."""
    require_gpu_hook(docker_api)
    since = time.time()
    request = make_request(
        ["true"], gpu_uuids=(GPU_A,), env={"NVIDIA_DRIVER_CAPABILITIES": "compute"}
    )
    status = executor_with(instance_id, gpu_mode="device-request").launch(request)
    (entry,) = [e for e in hook_log_entries(since) if e["container_id"] == status.id]
    assert entry["env"]["NVIDIA_DRIVER_CAPABILITIES"] == "compute"
    assert entry["nvidia_visible_devices"] == GPU_A
