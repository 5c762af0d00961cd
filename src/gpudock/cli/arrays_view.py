"""``gpudock jobs``: job arrays folded into one line each (``--expand`` unfolds them).

A folded line stands where the array's newest listed task would be: its ID is
``ARRAY[FIRST-LAST]`` (the indices listed), its STATE the counts of its
tasks per state (``3 RUNNING,5 PENDING``), its NOTE the first waiting
task's reason. Only the tasks in the listed page are counted. Light: no
pydantic, no rich.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

STATE_ORDER = ("RUNNING", "STARTING", "ALLOCATED", "PENDING",
               "SUCCEEDED", "FAILED", "CANCELLED", "LOST")  # fmt: skip


def fold(
    items: Sequence[dict[str, Any]], row: Callable[[dict[str, Any]], list[str]]
) -> list[list[str]]:
    """The table rows of ``items``: plain jobs as ``row`` draws them, arrays folded."""
    tasks: dict[int, list[dict[str, Any]]] = {}
    for job in items:
        if job.get("array_id") is not None:
            tasks.setdefault(job["array_id"], []).append(job)
    rows: list[list[str]] = []
    for job in items:
        array = job.get("array_id")
        if array is None:
            rows.append(row(job))
        elif tasks.get(array) and tasks[array][0] is job:
            rows.append(folded(tasks[array], row))
    return rows


def folded(
    tasks: Sequence[dict[str, Any]], row: Callable[[dict[str, Any]], list[str]]
) -> list[str]:
    """One row for an array's ``tasks`` (``row``'s columns: ID, …, STATE, …, NOTE)."""
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task["state"]] = counts.get(task["state"], 0) + 1
    indices = [t["array_index"] for t in tasks]
    waiting = next((t for t in tasks if t["state"] == "PENDING"), tasks[0])
    cells = row(waiting)
    cells[0] = f"{tasks[0]['array_id']}[{min(indices)}-{max(indices)}]"
    cells[5] = ",".join(f"{counts[s]} {s}" for s in STATE_ORDER if s in counts)
    cells[7] = "-" if len({t["node"] for t in tasks}) != 1 else (tasks[0]["node"] or "-")
    return cells
