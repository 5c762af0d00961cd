"""The reference docs stay short enough to read in one sitting: contracts, not history.

Figures belong in ``benchmarks/RESULTS.md`` and decisions in ``docs/decisions/``;
these two pages state what the scheduler and the simulator do and how to extend them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIMITS = {"src/gpudock/scheduler/README.md": 300, "docs/simulator.md": 450}


@pytest.mark.parametrize(("page", "limit"), sorted(LIMITS.items()))
def test_the_reference_page_stays_within_its_length(page: str, limit: int) -> None:
    lines = (REPO / page).read_text(encoding="utf-8").count("\n")
    assert lines <= limit, f"{page} has {lines} lines (at most {limit}): move history to git"
