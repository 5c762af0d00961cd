"""A job's ``gpu_model`` against the product names NVML reports (``gpu_model_matches``).

The names are real ``nvmlDeviceGetName`` answers; ``NVIDIA H200`` is the one
``scripts/gpu_check.py`` read from a real H200.
"""

from __future__ import annotations

import pytest

from gpudock.core.inventory import gpu_model_matches

H200 = "NVIDIA H200"
H20 = "NVIDIA H20"
GH200 = "NVIDIA GH200 480GB"
H100_SXM = "NVIDIA H100 80GB HBM3"
H100_PCIE = "NVIDIA H100 PCIe"
A100_SXM = "NVIDIA A100-SXM4-80GB"
A100_PCIE = "NVIDIA A100-PCIE-40GB"
A10 = "NVIDIA A10"
A10G = "NVIDIA A10G"
L4 = "NVIDIA L4"
L40S = "NVIDIA L40S"
V100 = "Tesla V100-SXM2-32GB"
V100S = "Tesla V100S-PCIE-32GB"
T4 = "Tesla T4"
RTX4090 = "NVIDIA GeForce RTX 4090"
EMULATED = "NVIDIA H100-80GB (emulated)"


@pytest.mark.parametrize(
    ("wanted", "name"),
    [
        ("H200", H200),
        ("h200", H200),
        ("NVIDIA H200", H200),
        ("H100", H100_SXM),
        ("H100", H100_PCIE),
        ("h100-80gb", H100_SXM),
        ("H100 80", H100_SXM),
        ("A100", A100_SXM),
        ("A100", A100_PCIE),
        ("a100-80gb", A100_SXM),
        ("A100 SXM4", A100_SXM),
        ("A100-SXM4-80GB", A100_SXM),
        ("A10", A10),
        ("A10", A10G),
        ("V100", V100),
        ("V100", V100S),
        ("T4", T4),
        ("nvidia t4", T4),
        ("RTX 4090", RTX4090),
        ("rtx4090", RTX4090),
        ("GH200", GH200),
        ("H100", EMULATED),
    ],
)
def test_a_model_matches_its_products(wanted: str, name: str) -> None:
    assert gpu_model_matches(wanted, name)


@pytest.mark.parametrize(
    ("wanted", "name"),
    [
        ("H20", H200),  # a model number is never cut: another product
        ("H200", H20),
        ("H200", GH200),
        ("H100", H200),
        ("A10", A100_SXM),
        ("A10", A100_PCIE),
        ("L4", L40S),
        ("A100-40GB", A100_SXM),
        ("a100-80gb", A100_PCIE),
        ("T4", L4),
        ("4090", "NVIDIA GeForce RTX 40900"),
        ("V100S", V100),
    ],
)
def test_a_model_does_not_match_other_products(wanted: str, name: str) -> None:
    assert not gpu_model_matches(wanted, name)


def test_a_model_without_words_matches_every_gpu() -> None:
    assert gpu_model_matches("-", H200)
