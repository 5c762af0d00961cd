"""GPU indices as ranges, and an ETA in the server's local time."""

from __future__ import annotations

import math

import pytest

from gpudock.scheduler.wording import expected_start, gpu_ranges, gpus_of


@pytest.mark.parametrize(
    ("indices", "words"),
    [([3], "3"), ([0, 1, 2, 3], "0-3"), ([6, 0, 1, 3], "0-1, 3, 6"), ([2, 2, 3], "2-3")],
)
def test_gpu_indices_read_as_ranges(indices: list[int], words: str) -> None:
    assert gpu_ranges(indices) == words


def test_one_gpu_is_singular() -> None:
    assert gpus_of([2], "gpu-0") == "GPU 2 of gpu-0 is"
    assert gpus_of([0, 1, 2, 3], "gpu-0") == "GPUs 0-3 of gpu-0 are"


def test_an_eta_is_a_local_clock_time_or_unknown() -> None:
    now = 14 * 3600.0  # 14:00 UTC (the conftest pins TZ=UTC)
    assert expected_start(now + 300, now) == "expected to start ≈ 14:05, in 5m00s"
    assert expected_start(math.inf, now) == "expected to start when running jobs end"
