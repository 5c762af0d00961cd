"""Building a container's create arguments: resolved mounts, memory, logs, user, GPU env.

Pure: no engine. Mount sources are resolved in a tmp tree of real symlinks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpudock.config import ExecutorConfig
from gpudock.core.job import Mount, parse_mount
from gpudock.executors._docker_spec import build_create_spec, engine_realpath, recheck_sources
from gpudock.executors.base import LaunchError, LaunchRequest
from gpudock.gpus.mps import MpsSetup

MiB = 1024 * 1024


def request(**fields: Any) -> LaunchRequest:
    return LaunchRequest(
        job_id=7,
        attempt=0,
        name="gpudock-t-7-a0",
        image="img",
        command=["true"],
        env=fields.pop("env", {}),
        gpu_uuids=fields.pop("gpu_uuids", ()),
        **fields,
    )


def spec_of(req: LaunchRequest, **config: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    built = build_create_spec(
        req, ExecutorConfig.model_validate(config), "inst", device_request=False
    )
    return built.container, built.host


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path.resolve()
    (root / "scratch" / "work").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "scratch" / "to-root").symlink_to("/")
    (root / "scratch" / "to-data").symlink_to(root / "data")
    (root / "scratch" / "alias").symlink_to("work")
    return root


def mounts_config(tree: Path) -> dict[str, Any]:
    return {"allowed_mounts": [f"{tree}/scratch:rw", f"{tree}/data"]}


def test_mounts_bind_the_resolved_path_with_the_jobs_mode(tree: Path) -> None:
    mounts = (
        parse_mount(f"{tree}/scratch/alias:/w:rw"),
        parse_mount(f"{tree}/scratch/to-data:/d"),  # read-only by default
    )
    _, host = spec_of(request(mounts=mounts), **mounts_config(tree))
    bound = [(m["Source"], m["Target"], m["ReadOnly"]) for m in host["mounts"]]
    assert bound == [(f"{tree}/scratch/work", "/w", False), (f"{tree}/data", "/d", True)]


@pytest.mark.parametrize(
    ("mount", "message"),
    [
        ("{t}/scratch/to-root:/host", "resolves to /, outside the admin allowlist"),
        ("{t}/scratch/to-root/etc:/etc2", "resolves to /etc, outside"),
        ("{t}/scratch/to-data:/d:rw", "under read-only allowlist entry {t}/data"),
        ("{t}/data:/d:rw", "entry {t}/data, which is read-only"),
        ("{t}/scratch/missing:/m", "cannot be resolved"),
        ("{t}/scratch/../../..:/r", "is not in the admin allowlist"),
    ],
)
def test_a_mount_leaving_the_allowlist_is_a_launch_error(
    tree: Path, mount: str, message: str
) -> None:
    req = request(mounts=(parse_mount(mount.format(t=tree)),))
    with pytest.raises(LaunchError, match=message.format(t=tree)):
        spec_of(req, **mounts_config(tree))


def test_a_remote_engine_cannot_resolve_so_mounts_are_refused(tree: Path) -> None:
    resolve = engine_realpath("tcp://10.0.0.5:2375", None)
    req = request(mounts=(Mount(host=f"{tree}/scratch", container="/s", read_only=True),))
    config = ExecutorConfig.model_validate(mounts_config(tree))
    with pytest.raises(LaunchError, match=r"engine tcp://10\.0\.0\.5:2375 is not on this host"):
        build_create_spec(req, config, "inst", device_request=False, realpath=resolve)
    assert engine_realpath(None, "unix:///var/run/docker.sock")(str(tree)) == str(tree)
    assert engine_realpath(None, None)(str(tree)) == str(tree)


def test_memory_swap_equals_memory_unless_allowed() -> None:
    _, host = spec_of(request(memory=64 * MiB))
    assert (host["mem_limit"], host["memswap_limit"]) == (64 * MiB, 64 * MiB)
    _, host = spec_of(request(memory=64 * MiB), allow_swap=True)
    assert "memswap_limit" not in host
    _, host = spec_of(request(), default_memory="32MiB")
    assert (host["mem_limit"], host["memswap_limit"]) == (32 * MiB, 32 * MiB)
    _, host = spec_of(request())
    assert "mem_limit" not in host and "memswap_limit" not in host


def test_logs_rotate_per_config() -> None:
    _, host = spec_of(request())
    assert host["log_config"]["Type"] == "json-file"
    assert host["log_config"]["Config"] == {"max-size": str(50 * MiB), "max-file": "3"}
    _, host = spec_of(request(), log_max_size="10MiB", log_max_files=5)
    assert host["log_config"]["Config"] == {"max-size": str(10 * MiB), "max-file": "5"}


def test_a_configured_user_is_set_and_none_by_default() -> None:
    container, _ = spec_of(request())
    assert "user" not in container
    container, _ = spec_of(request(), user="1000:1000")
    assert container["user"] == "1000:1000"


def test_env_carries_the_capability_policy_and_gpudocks_own_devices() -> None:
    env = {"NVIDIA_DRIVER_CAPABILITIES": "utility", "CUDA_VISIBLE_DEVICES": "3"}
    container, _ = spec_of(request(env=env, gpu_uuids=("GPU-a",)))
    assert container["environment"]["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert container["environment"]["NVIDIA_VISIBLE_DEVICES"] == "GPU-a"
    assert "CUDA_VISIBLE_DEVICES" not in container["environment"]
    container, _ = spec_of(request(), driver_capabilities="compute,utility,video")
    assert container["environment"]["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility,video"


def test_the_recheck_before_start_refuses_a_source_that_became_a_symlink(tree: Path) -> None:
    allowlist = ExecutorConfig.model_validate(mounts_config(tree)).allowed_mounts
    source = {"Type": "bind", "Source": f"{tree}/scratch/work", "ReadOnly": False}
    recheck_sources([source], allowlist)  # unchanged: fine
    (tree / "scratch" / "work").rmdir()
    (tree / "scratch" / "work").symlink_to("../data")
    with pytest.raises(LaunchError, match=f"now resolves to {tree}/data"):
        recheck_sources([{**source, "ReadOnly": True}], allowlist)
    with pytest.raises(LaunchError, match="under read-only allowlist entry"):
        recheck_sources([source], allowlist)


def test_the_recheck_accepts_a_source_under_a_symlinked_entrys_target(tree: Path) -> None:
    """``/datasets -> data``: the bound source is ``data/x``, not under ``/datasets`` as written."""
    (tree / "datasets").symlink_to(tree / "data")
    (tree / "data" / "x").mkdir()
    req = request(mounts=(parse_mount(f"{tree}/datasets/x:/x"),))
    _, host = spec_of(req, allowed_mounts=[f"{tree}/datasets"])
    assert host["mounts"][0]["Source"] == f"{tree}/data/x"
    allowlist = ExecutorConfig.model_validate({"allowed_mounts": [f"{tree}/datasets"]})
    recheck_sources(host["mounts"], allowlist.allowed_mounts)  # no raise


GiB = 1024 * MiB


def test_a_shared_job_gets_its_limit_as_framework_hints() -> None:
    env = {"TF_FORCE_GPU_ALLOW_GROWTH": "false"}  # a framework setting the job chose stays
    req = request(env=env, gpu_uuids=("GPU-a",), gpu_memory=20 * GiB, gpu_memory_total=80 * GiB)
    container, host = spec_of(req)
    got = container["environment"]
    assert got["GPUDOCK_GPU_MEMORY_LIMIT_BYTES"] == str(20 * GiB)
    assert got["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.250"
    assert got["TF_FORCE_GPU_ALLOW_GROWTH"] == "false"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in got  # left to the job
    assert not any(key.startswith("CUDA_MPS_") for key in got)  # no MPS on this node
    assert "ipc_mode" not in host
    whole, _ = spec_of(request(gpu_uuids=("GPU-a",)))
    assert "GPUDOCK_GPU_MEMORY_LIMIT_BYTES" not in whole["environment"]


def test_the_xla_fraction_rounds_down_so_it_never_exceeds_the_share() -> None:
    req = request(gpu_uuids=("GPU-a",), gpu_memory=2 * GiB, gpu_memory_total=3 * GiB)
    container, _ = spec_of(req)
    assert container["environment"]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.666"


def test_a_shared_job_on_an_mps_node_gets_the_limits_mounts_and_host_ipc() -> None:
    mps = MpsSetup("/run/mps", "/var/log/mps")
    env = {"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=80G"}  # stored before the policy: dropped
    req = request(
        env=env, gpu_uuids=("GPU-a", "GPU-b"), gpu_memory=4 * GiB, gpu_compute=25, mps=mps
    )
    container, host = spec_of(req)
    got = container["environment"]
    assert {k: v for k, v in got.items() if k.startswith("CUDA_MPS_")} == {
        "CUDA_MPS_PIPE_DIRECTORY": "/run/mps",
        "CUDA_MPS_LOG_DIRECTORY": "/var/log/mps",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M,1=4096M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
    }
    assert host["ipc_mode"] == "host"
    binds = [(m["Source"], m["Target"], m["ReadOnly"]) for m in host["mounts"]]
    assert binds == [("/run/mps", "/run/mps", False), ("/var/log/mps", "/var/log/mps", False)]
    whole, whole_host = spec_of(request(gpu_uuids=("GPU-a",), mps=mps))  # whole GPUs: no MPS
    assert "CUDA_MPS_PIPE_DIRECTORY" not in whole["environment"] and "ipc_mode" not in whole_host
