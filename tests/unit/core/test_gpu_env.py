"""The GPU env policy: which NVIDIA keys a job may set, and capabilities it may only narrow."""

from __future__ import annotations

import pytest

from gpudock.core.gpu_env import (
    EnvRefused,
    check_container_user,
    check_job_env,
    driver_capabilities,
    launch_env,
    parse_capabilities,
)

POLICY = "compute,utility"


def test_capabilities_parse_to_a_canonical_order_and_all_expands() -> None:
    assert parse_capabilities(" utility , compute") == ("compute", "utility")
    assert len(parse_capabilities("all")) == 7
    with pytest.raises(ValueError, match="unknown driver capabilities gpu"):
        parse_capabilities("compute,gpu")
    with pytest.raises(ValueError, match="must not be empty"):
        parse_capabilities(" , ")


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"NVIDIA_DRIVER_CAPABILITIES": "utility"},
        {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"},
        {"NVIDIA_REQUIRE_CUDA": "cuda>=12.0 brand=tesla"},
        {"NVIDIAN": "x", "MY_CUDA_VISIBLE_DEVICES": "1"},  # not the refused keys
    ],
)
def test_a_job_may_narrow_capabilities_and_require_a_cuda(env: dict[str, str]) -> None:
    check_job_env(env, POLICY)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"CUDA_VISIBLE_DEVICES": "0"}, "env key 'CUDA_VISIBLE_DEVICES' is not allowed"),
        ({"NVIDIA_DISABLE_REQUIRE": "1"}, "env key 'NVIDIA_DISABLE_REQUIRE' is not allowed"),
        ({"NVIDIA_MIG_CONFIG_DEVICES": "all"}, "'NVIDIA_MIG_CONFIG_DEVICES' is not allowed"),
        (
            {"NVIDIA_DRIVER_CAPABILITIES": "utility,video"},
            "asks for video, beyond what this server allows (compute, utility)",
        ),
        ({"NVIDIA_DRIVER_CAPABILITIES": "all"}, "asks for compat32, display, graphics, ngx"),
        ({"NVIDIA_DRIVER_CAPABILITIES": "gpu"}, "'NVIDIA_DRIVER_CAPABILITIES': unknown"),
    ],
)
def test_other_keys_and_wider_capabilities_are_refused_naming_the_key(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(EnvRefused, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_job_env(env, POLICY)


def test_an_all_policy_lets_jobs_ask_for_anything_known() -> None:
    check_job_env({"NVIDIA_DRIVER_CAPABILITIES": "all"}, "all")
    assert driver_capabilities({"NVIDIA_DRIVER_CAPABILITIES": "graphics"}, "all") == "graphics"


def test_launch_env_clamps_to_the_policy_and_drops_refused_keys() -> None:
    stored = {
        "NVIDIA_DRIVER_CAPABILITIES": "video,utility",
        "CUDA_VISIBLE_DEVICES": "3",
        "NVIDIA_GDS": "enabled",
        "NVIDIA_REQUIRE_CUDA": "cuda>=12",
        "HOME": "/work",
    }
    assert launch_env(stored, POLICY) == {
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
        "NVIDIA_REQUIRE_CUDA": "cuda>=12",
        "HOME": "/work",
    }
    assert launch_env({}, POLICY) == {"NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
    only_wider = {"NVIDIA_DRIVER_CAPABILITIES": "graphics"}
    assert launch_env(only_wider, POLICY)["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"


@pytest.mark.parametrize(("text", "result"), [("1000:1000", "1000:1000"), (" 007:42 ", "7:42")])
def test_container_user_is_numeric_and_not_root(text: str, result: str) -> None:
    assert check_container_user(text) == result


@pytest.mark.parametrize(
    ("text", "message"),
    [("nobody", "must be numeric"), ("1000", "must be numeric"), ("0:100", "not be root")],
)
def test_a_bad_container_user_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_container_user(text)


def test_mps_keys_are_gpudocks_and_refused() -> None:
    for key in ("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"):
        with pytest.raises(EnvRefused, match=f"env key '{key}' is not allowed: gpudock sets"):
            check_job_env({key: "0=80G"}, POLICY)
    assert launch_env({"CUDA_MPS_PIPE_DIRECTORY": "/x", "CUDA_MPSX": "1"}, POLICY) == {
        "CUDA_MPSX": "1",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }
