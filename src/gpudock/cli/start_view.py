"""Estimated start times in the CLI (``GET /v1/jobs/estimates``): ``jobs --start``, ``why``.

Light: no pydantic, no rich.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from gpudock.cli.common import call


def fetch(job_id: int | None = None) -> dict[int, dict[str, Any]]:
    """The caller's estimates (or one job's), by job id."""
    params = {"job": job_id} if job_id is not None else None
    return {e["job"]: e for e in call("GET", "/v1/jobs/estimates", params=params)}


def start_text(estimate: dict[str, Any] | None) -> str:
    """``now``, ``14:05 (max_runtime)``, ``Dec 04 09:00 (queue_default)`` or ``unknown``."""
    if estimate is None:
        return "-"
    if estimate["start"] is None:
        return "unknown"
    if estimate["basis"] == "now":
        return "now"
    at = time.localtime(estimate["start"])
    same_day = time.strftime("%Y%m%d", at) == time.strftime("%Y%m%d")
    when = time.strftime("%H:%M" if same_day else "%b %d %H:%M", at)
    return f"{when} ({estimate['basis']})"


def with_start(
    row: Callable[[dict[str, Any]], list[str]], estimates: dict[int, dict[str, Any]]
) -> Callable[[dict[str, Any]], list[str]]:
    """``row`` with a START cell before its last (NOTE) cell."""

    def drawn(job: dict[str, Any]) -> list[str]:
        cells = row(job)
        return [*cells[:-1], start_text(estimates.get(job["id"])), cells[-1]]

    return drawn
