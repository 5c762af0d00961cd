"""Times in the CLI's ``-o json``: ISO 8601 with a timezone, not epoch seconds.

The API speaks epoch seconds (``submitted_at: 1796299200.5``); the CLI's JSON
is for people and scripts alike, so ``iso_times`` turns every time field
into ``2026-12-03T12:00:00.500+00:00`` (UTC; milliseconds only when the time
has a fraction). Time fields are the keys in ``TIME_KEYS`` and every key
ending in ``_at``, at any depth; durations (``max_runtime``) are left alone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

TIME_KEYS = frozenset({"at", "last_seen", "eta"})


def is_time_key(key: str) -> bool:
    return key in TIME_KEYS or key.endswith("_at")


def iso(seconds: float) -> str:
    """Epoch seconds as ISO 8601 in UTC."""
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    spec = "seconds" if float(seconds).is_integer() else "milliseconds"
    return moment.isoformat(timespec=spec)


def iso_times(data: Any) -> Any:
    """``data`` (decoded JSON) with each time field's number as ``iso`` text."""
    if isinstance(data, list):
        return [iso_times(item) for item in data]
    if isinstance(data, dict):
        return {
            key: iso(value) if _is_time(key, value) else iso_times(value)
            for key, value in data.items()
        }
    return data


def _is_time(key: Any, value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and isinstance(key, str) and is_time_key(key)
