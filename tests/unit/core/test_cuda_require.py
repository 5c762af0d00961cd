"""The NVIDIA_REQUIRE_* grammar: comma is AND, space is OR, every variable must hold."""

from __future__ import annotations

import pytest

from gpudock.core.cuda_require import (
    GpuFacts,
    image_requirements,
    parse_env_list,
    parse_requirement,
)

CUDA_IMAGE = (
    "cuda>=12.4 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 "
    "brand=nvidia,driver>=535,driver<536"
)


def facts(cuda: str, driver: str, brand: str = "nvidia", arch: str = "9.0") -> GpuFacts:
    return GpuFacts.of(cuda, driver, arch, brand)


def test_a_new_enough_driver_meets_the_cuda_constraint() -> None:
    requirement = parse_requirement(CUDA_IMAGE)
    assert requirement.holds(facts("12.4", "550.54.15"))
    assert requirement.holds(facts("12.6", "560.28.03"))
    assert not requirement.holds(facts("12.2", "550.54.15", brand="geforce"))


def test_an_alternative_of_anded_constraints_also_holds() -> None:
    requirement = parse_requirement(CUDA_IMAGE)
    # CUDA 12.2 only, but a datacenter 470/535 branch: the forward-compatibility package
    assert requirement.holds(facts("11.4", "470.82.01", brand="tesla"))
    assert requirement.holds(facts("12.2", "535.161.08", brand="nvidia"))
    assert not requirement.holds(facts("12.2", "536.1", brand="nvidia"))  # driver<536 fails
    assert requirement.min_cuda() == (12, 4)


def test_versions_compare_by_number_and_pad_with_zeros() -> None:
    assert parse_requirement("cuda>=12.10").holds(facts("12.10", "1"))
    assert not parse_requirement("cuda>=12.10").holds(facts("12.9", "1"))
    assert parse_requirement("cuda=12.4.0").holds(facts("12.4", "1"))
    assert parse_requirement("arch>=8.0,arch!=8.6").holds(facts("12.4", "1", arch="9.0"))
    assert not parse_requirement("arch>=8.0,arch!=8.6").holds(facts("12.4", "1", arch="8.6"))


def test_an_unknown_fact_never_meets_a_constraint() -> None:
    assert not parse_requirement("cuda>=11.0").holds(GpuFacts())
    assert GpuFacts.of("garbage", None, None, None) == GpuFacts()


@pytest.mark.parametrize(
    "text", ["cuda>=x.1", "cuda~=12", "gpu>=1", "cuda>=12.4,", "cuda >= 12.4 nonsense"]
)
def test_a_malformed_constraint_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_requirement(text)


def test_every_variable_must_hold_and_the_reason_names_both_versions() -> None:
    env = parse_env_list(
        ["PATH=/bin", f"NVIDIA_REQUIRE_CUDA={CUDA_IMAGE}", "NVIDIA_REQUIRE_ARCH=arch>=8.0"]
    )
    needs = image_requirements(env)
    assert needs is not None
    assert needs.check(facts("12.4", "550.54.15")) is None
    assert needs.check(facts("12.2", "550.54.15", brand="geforce")) == (
        "image needs CUDA ≥ 12.4; driver supports 12.2"
    )
    assert needs.check(facts("12.4", "550.54.15", arch="7.5")) == (
        "NVIDIA_REQUIRE_ARCH is not met (arch>=8.0)"
    )
    assert needs.min_cuda() == (12, 4)


def test_nothing_required_or_checks_disabled_is_none() -> None:
    assert image_requirements({"PATH": "/bin"}) is None
    disabled = {"NVIDIA_REQUIRE_CUDA": "cuda>=99.0", "NVIDIA_DISABLE_REQUIRE": "true"}
    assert image_requirements(disabled) is None
    with pytest.raises(ValueError, match="NVIDIA_REQUIRE_CUDA: constraint"):
        image_requirements({"NVIDIA_REQUIRE_CUDA": "cuda>>12"})
