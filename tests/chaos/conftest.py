"""The chaos runs' options, ``--seed`` and ``--duration`` (declared in ``tests/conftest.py``).

CI runs ``tests/chaos`` for its default two minutes; a longer run is
``pytest tests/chaos --duration 1200 --seed 7``.
"""

from __future__ import annotations

import pytest


@pytest.fixture
def chaos_seed(request: pytest.FixtureRequest) -> int:
    return int(request.config.getoption("--seed"))


@pytest.fixture
def chaos_duration(request: pytest.FixtureRequest) -> float:
    return float(request.config.getoption("--duration"))
