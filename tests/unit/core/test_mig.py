"""MIG profiles, what a job may ask, and the layouts ``gpudock mig plan`` suggests."""

from __future__ import annotations

import pytest

from gpudock.core.mig import (
    Placed,
    fits,
    known_profiles,
    mig_model,
    mig_request_problem,
    profile_syntax_problem,
    unknown_profile_problem,
)
from gpudock.core.mig_plan import PlanGpu, describe, plan_mig

H100 = "NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize("name", ["1g.10gb", "7g.80gb", "1g.10gb+me", "3g.71gb", "7g.141gb"])
def test_profile_names_parse(name: str) -> None:
    assert profile_syntax_problem(name) is None


@pytest.mark.parametrize(
    "name", ["1g10gb", "8g.80gb", "0g.5gb", "1g.10GB", "3g.40gb ", "1g.gb", ""]
)
def test_malformed_profile_names_are_refused(name: str) -> None:
    assert "is not a MIG profile name" in (profile_syntax_problem(name) or "")


def test_a_mig_job_takes_one_device_and_no_memory_share() -> None:
    assert mig_request_problem("1g.10gb", 1, None) is None
    assert mig_request_problem("1g.10gb", 0, None) is None  # the default count reads as one
    assert mig_request_problem("1g.10gb", 2, None) == (
        "mig asks for one 1g.10gb device; it cannot be combined with gpus: 2"
    )
    assert "leave gpu_memory out" in (mig_request_problem("1g.10gb", 1, 4 << 30) or "")
    assert "not a MIG profile name" in (mig_request_problem("big", 1, None) or "")


def test_each_model_gets_its_table() -> None:
    def names(gpu: str) -> list[str] | None:
        model = mig_model(gpu)
        return None if model is None else [p.name for p in model.profiles]

    assert names("NVIDIA A100-SXM4-40GB") == [
        "1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb",
    ]  # fmt: skip
    assert names("NVIDIA A100-SXM4-80GB") == names(H100)
    assert names("NVIDIA H200")[-1] == "7g.141gb"  # type: ignore[index]
    assert names("NVIDIA H100 NVL")[-1] == "7g.94gb"  # type: ignore[index]
    assert names("Tesla T4") is None
    assert names("NVIDIA H20") is None  # another product, no table


def test_known_profiles_are_the_tables_of_the_gpus_plus_what_nvml_reports() -> None:
    known = known_profiles(["Tesla T4", H100], discovered=["1g.12gb"])
    assert {"1g.10gb", "3g.40gb", "7g.80gb", "1g.12gb"} <= known
    assert "1g.5gb" not in known
    assert unknown_profile_problem("3g.40gb", known) is None
    problem = unknown_profile_problem("1g.5gb", known)
    assert problem is not None and problem.startswith("mig '1g.5gb' is not a profile any node")
    assert "none (no MIG-capable GPU)" in (unknown_profile_problem("1g.5gb", set()) or "")


def test_fits_follows_the_valid_placements() -> None:
    model = mig_model(H100)
    assert model is not None
    p = {x.name: x for x in model.profiles}
    assert fits([], p["7g.80gb"]) == 0
    assert fits([Placed(p["1g.10gb"], 0)], p["7g.80gb"]) is None
    assert fits([Placed(p["4g.40gb"], 0)], p["3g.40gb"]) == 4
    assert fits([Placed(p["3g.40gb"], 4)], p["4g.40gb"]) == 0
    assert fits([Placed(p["3g.40gb"], 0)], p["4g.40gb"]) is None  # 4g starts at 0 only
    ones = [Placed(p["1g.10gb"], i) for i in range(7)]
    assert fits(ones, p["1g.10gb"]) is None  # seven compute slices in use
    assert fits([Placed(p["1g.10gb+me"], 0)], p["1g.10gb+me"]) is None  # one per GPU


def gpu(index: int, mig_mode: bool = False, **fields: object) -> PlanGpu:
    return PlanGpu("n1", index, f"GPU-{index}", H100, mig_mode, **fields)  # type: ignore[arg-type]


def test_plan_packs_largest_first_and_prints_the_commands() -> None:
    plan = plan_mig([gpu(0), gpu(1)], {"1g.10gb": 3, "3g.40gb": 1, "2g.20gb": 1})

    first, second = plan.layouts
    assert describe(first.profiles) == "3g.40gb@0 + 2g.20gb@4 + 1g.10gb@6"
    assert first.commands == (
        "nvidia-smi -i 0 -mig 1",
        "nvidia-smi --gpu-reset -i 0  # MIG mode takes effect after a reset",
        "nvidia-smi mig -i 0 -cgi 3g.40gb,2g.20gb,1g.10gb -C",
    )
    assert describe(second.profiles) == "1g.10gb@0 + 1g.10gb@1"  # no 1g start at slice 7
    assert plan.unmet == {} and plan.kept == {}


def test_plan_keeps_idle_devices_that_serve_and_leaves_busy_gpus_alone() -> None:
    gpus = [
        gpu(0, mig_mode=True, idle_devices=("1g.10gb", "1g.10gb")),  # serves two: kept as is
        gpu(1, busy=True),  # a job holds it: never re-laid
        gpu(2, mig_mode=True, busy_devices=("3g.40gb",)),  # a job on one of its devices
        gpu(3, mig_mode=True, idle_devices=("7g.80gb",)),  # in MIG mode, idle, unused: first
    ]
    plan = plan_mig(gpus, {"1g.10gb": 2, "3g.40gb": 2})

    assert plan.kept == {"1g.10gb": 2}
    [layout] = plan.layouts
    assert layout.gpu.index == 3
    assert describe(layout.profiles) == "3g.40gb@0 + 3g.40gb@4"
    assert layout.commands == (
        "nvidia-smi mig -i 3 -dci",
        "nvidia-smi mig -i 3 -dgi",
        "nvidia-smi mig -i 3 -cgi 3g.40gb,3g.40gb -C",
    )
    assert plan.unmet == {}


def test_demand_no_gpu_can_serve_says_why() -> None:
    t4 = PlanGpu("n1", 0, "GPU-t4", "Tesla T4", None)
    plan = plan_mig([t4, gpu(1, busy=True)], {"1g.5gb": 1, "7g.80gb": 1})

    assert plan.layouts == []
    assert plan.unmet == {
        "1g.5gb": (1, "no GPU model here offers 1g.5gb"),
        "7g.80gb": (1, "every GPU that offers 7g.80gb holds jobs; plan again when they end"),
    }
