"""The real traces (Philly, Alibaba...) for the tests that pin figures on them.

They live outside the repository: at ``$GPUDOCK_TRACES``, else at ``../shared/traces``
beside the project root (``benchmarks/_meta.traces_dir``, the one lookup the
benchmarks use too). A test that needs them fails under ``CI=true`` when they are
missing, and skips elsewhere.
"""

from __future__ import annotations

from pathlib import Path

from benchmarks._meta import TRACES_ENV, traces_dir
from tests.kit.docker import unavailable


def real(relative: str) -> Path:
    """``relative`` under the real traces' folder; fails (CI) or skips if the folder is absent."""
    root = traces_dir()
    if not root.is_dir():
        unavailable(f"real traces not found at {root} (set {TRACES_ENV})")
    return root / relative
