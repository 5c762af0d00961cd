"""Job arrays: ``--array FIRST-LAST[%LIMIT]`` (Slurm's spelling).

One submit of an array creates one job per index, its *tasks*; each task is
an ordinary job that also carries its array's id (the id of its first task)
and its own index, and at most ``LIMIT`` tasks of the array hold resources at
once (``queue/gates.py``). Parsing is pure; the maximum number of tasks is
the server's (``api.max_array_size``), checked by ``services/arrays.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ARRAY_PATTERN = r"^[0-9]{1,9}(-[0-9]{1,9})?(%[0-9]{1,9})?$"
_ARRAY_RE = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?(?:%([0-9]{1,9}))?")


@dataclass(frozen=True, slots=True)
class ArrayRange:
    """Indices ``first..last`` (both included); ``limit``: tasks running at once, or None."""

    first: int
    last: int
    limit: int | None = None

    @property
    def size(self) -> int:
        return self.last - self.first + 1

    def indices(self) -> range:
        return range(self.first, self.last + 1)


def parse_array(text: str) -> ArrayRange:
    """``"0-99%8"`` → ``ArrayRange(0, 99, 8)``; ``"5"`` is the one index 5.

    Raises ``ValueError`` with a one-line message for any other text, a range
    whose first index exceeds its last, or a limit of 0.
    """
    match = _ARRAY_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"array {text!r} must look like FIRST-LAST[%LIMIT], e.g. 0-99%8")
    first = int(match.group(1))
    last = int(match.group(2)) if match.group(2) is not None else first
    limit = int(match.group(3)) if match.group(3) is not None else None
    if first > last:
        raise ValueError(f"array {text!r}: the first index {first} exceeds the last {last}")
    if limit == 0:
        raise ValueError(f"array {text!r}: the limit after % must be at least 1")
    return ArrayRange(first, last, limit)


@dataclass(frozen=True, slots=True)
class ArrayTask:
    """Where a stored job sits in its job array."""

    array_id: int | None  # None: the first task; its own id becomes the array's
    index: int
    limit: int | None


def array_env(array_id: int | None, index: int | None) -> dict[str, str]:
    """``GPUDOCK_ARRAY_ID`` and ``GPUDOCK_ARRAY_INDEX`` for a task; nothing for a plain job."""
    if array_id is None or index is None:
        return {}
    return {"GPUDOCK_ARRAY_ID": str(array_id), "GPUDOCK_ARRAY_INDEX": str(index)}
