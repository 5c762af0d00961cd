"""Fixtures for discovery against the fake ``libnvidia-ml.so.1`` (needs gcc)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.kit.fake_nvml import FakeNvml, make_fake_nvml


@pytest.fixture
def fake_nvml(tmp_path: Path) -> FakeNvml:
    """A freshly built fake NVML with two healthy H100s; edit ``.state``, then ``.discover()``.

    Skips without gcc, or fails under ``CI=true``.
    """
    return make_fake_nvml(tmp_path)
