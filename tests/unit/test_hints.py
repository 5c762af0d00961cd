"""``gpudock.hints.apply_torch_limit``: a job caps PyTorch at its share on every device.

PyTorch with CUDA needs a GPU; the stand-in here is the few ``torch.cuda`` calls
the helper makes, recording what it was told.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpudock import hints

GIB = 1024**3


class Cuda:
    def __init__(self, available: bool = True) -> None:
        self.available = available
        self.set: list[tuple[float, int]] = []

    def is_available(self) -> bool:
        return self.available

    def device_count(self) -> int:
        return 2

    def get_device_properties(self, device: int) -> Any:
        return type("Props", (), {"total_memory": 80 * GIB})

    def set_per_process_memory_fraction(self, fraction: float, device: int) -> None:
        self.set.append((fraction, device))


def torch_with(cuda: Cuda) -> Any:
    return type("Torch", (), {"cuda": cuda})


def test_the_limit_from_the_env_is_applied_to_each_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hints.LIMIT_ENV, str(20 * GIB))
    cuda = Cuda()
    assert hints.apply_torch_limit(torch_with(cuda)) == {0: 0.25, 1: 0.25}
    assert cuda.set == [(0.25, 0), (0.25, 1)]


def test_no_limit_or_no_cuda_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(hints.LIMIT_ENV, raising=False)
    cuda = Cuda()
    assert hints.apply_torch_limit(torch_with(cuda)) == {} and cuda.set == []
    monkeypatch.setenv(hints.LIMIT_ENV, "not a number")
    assert hints.memory_limit() is None
    monkeypatch.setenv(hints.LIMIT_ENV, str(GIB))
    assert hints.apply_torch_limit(torch_with(Cuda(available=False))) == {}
