"""The labels gpudock puts on every container, and Docker's timestamps: shared by the
executors and the node agent (light: no config, no docker-py)."""

from __future__ import annotations

import re
from datetime import datetime

LABEL_JOB = "gpudock.job"
LABEL_ATTEMPT = "gpudock.attempt"
LABEL_INSTANCE = "gpudock.instance"
LABEL_GPUS = "gpudock.gpus"

__all__ = ["LABEL_ATTEMPT", "LABEL_GPUS", "LABEL_INSTANCE", "LABEL_JOB", "parse_engine_time"]

_NULL_TIME_PREFIX = "0001-01-01"
_TIME_RE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$")


def parse_engine_time(text: str | None) -> float | None:
    """Docker's RFC 3339 (nanosecond) timestamps → unix seconds; zero time → None."""
    if not text or text.startswith(_NULL_TIME_PREFIX):
        return None
    match = _TIME_RE.match(text)
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    stamp = datetime.fromisoformat(whole + ("+00:00" if zone in (None, "Z") else zone))
    return stamp.timestamp() + (float("0." + fraction) if fraction else 0.0)
