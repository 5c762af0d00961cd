"""``discover``'s fallback when NVML is unavailable, without touching NVML."""

from __future__ import annotations

import logging

import pytest

import gpudock.gpus
from gpudock.core.inventory import NodeInventory
from gpudock.gpus import NvmlUnavailable, discover, format_cuda_version


def test_nvml_unavailable_gives_zero_gpus_and_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    reason = "NVML not available (Driver Not Loaded): the NVIDIA kernel driver is not loaded"

    def unavailable(node_name: str) -> NodeInventory:
        raise NvmlUnavailable(reason)

    monkeypatch.setattr(gpudock.gpus, "discover_nvml", unavailable)
    with caplog.at_level(logging.DEBUG, logger="gpudock.gpus"):
        inventory = discover("node-a")

    assert inventory == NodeInventory(name="node-a", gpus=(), source="none", note=reason)
    assert [(r.name, r.levelno) for r in caplog.records] == [("gpudock.gpus", logging.WARNING)]
    assert caplog.records[0].getMessage() == f"no GPUs discovered on node-a: {reason}"


@pytest.mark.parametrize(
    ("value", "text"), [(12040, "12.4"), (12000, "12.0"), (11080, "11.8"), (13010, "13.1")]
)
def test_format_cuda_version(value: int, text: str) -> None:
    assert format_cuda_version(value) == text
