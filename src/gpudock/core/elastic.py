"""Elastic jobs: a GPU range instead of one count (``gpus: 2-4``).

A job may ask for ``gpus: "2-4"``, ``min_gpus: 2, max_gpus: 4``, or
``max_gpus: 4`` alone (1 to 4); the spec stores ``gpus`` (the minimum) and
``max_gpus``. It starts when its minimum
fits, on one node, and gets more GPUs (up to ``max_gpus``) only when no
other job is waiting for them. With ``elastic: restart`` a running job may
also be restarted on more GPUs later (gpudock cannot change a running
container's devices); either way its GPUs above the minimum are the first
taken back when another job needs them. The container learns its size from
``GPUDOCK_GPUS`` (its GPU uuids) and ``WORLD_SIZE`` (their number).

Whole GPUs on one node only: no ``gpu_memory`` shares, no ``nodes > 1`` and
no ``topology`` (a larger size could need another NVLink domain).
"""

from __future__ import annotations

import re
from typing import Any, Literal

ElasticMode = Literal["restart"]
GPU_COUNT = r"0*(?:[1-9][0-9]{0,2}|10[01][0-9]|102[0-4])"
"""1 to 1024 (leading zeros allowed): each end of a GPU range."""
GPU_RANGE_PATTERN = rf"^\s*{GPU_COUNT}\s*-\s*{GPU_COUNT}\s*$"
_LOOSE_RANGE_RE = re.compile(r"^\s*([0-9]{1,9})\s*-\s*([0-9]{1,9})\s*$")


def gpus_schema(schema: dict[str, Any]) -> None:
    """``gpus`` in the JSON Schema: an integer in its bounds, or a range (``'2-4'``)."""
    integer = {"type": schema.pop("type", "integer")}
    for bound in ("minimum", "maximum"):
        if bound in schema:
            integer[bound] = schema.pop(bound)
    schema["anyOf"] = [integer, {"type": "string", "pattern": GPU_RANGE_PATTERN}]


def parse_gpu_range(text: str) -> tuple[int, int]:
    """``"2-4"`` as ``(2, 4)``; ``ValueError`` naming the problem. Ends outside 1-1024
    are parsed, for ``range_problem`` and the field bounds to name."""
    match = _LOOSE_RANGE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"gpus must be a number or a range such as '2-4', not {text!r}")
    return int(match[1]), int(match[2])


def normalise_range(data: dict[str, Any]) -> dict[str, Any]:
    """A spec's raw fields with a GPU range as ``gpus`` (minimum) and ``max_gpus``.

    Accepts ``gpus: "2-4"``, or ``min_gpus`` and ``max_gpus``, or ``max_gpus``
    alone (the minimum is then 1); refuses a minimum given twice.
    ``max_gpus`` equal to the minimum is a fixed count.
    """
    data = dict(data)
    gpus = data.get("gpus")
    if isinstance(gpus, str) and "-" in gpus:
        if "min_gpus" in data or data.get("max_gpus") is not None:
            raise ValueError("give gpus as a range ('2-4') or min_gpus and max_gpus, not both")
        data["gpus"], data["max_gpus"] = parse_gpu_range(gpus)
    if "min_gpus" in data:
        if "gpus" in data:
            raise ValueError("give min_gpus or gpus (the minimum), not both")
        data["gpus"] = data.pop("min_gpus")
    elif data.get("max_gpus") is not None and "gpus" not in data:
        data["gpus"] = 1  # ``max_gpus: 4`` alone: 1 to 4 GPUs
    return data


def range_problem(
    gpus: int,
    max_gpus: int | None,
    elastic: str | None,
    shared: bool,
    nodes: int,
    topology: str | None,
) -> str | None:
    """Why a spec's GPU range is refused (one line), or None when it is sound."""
    if max_gpus is None:
        if elastic is not None:
            return "elastic: restart needs a GPU range (gpus: '2-4', or min_gpus and max_gpus)"
        return None
    if gpus > max_gpus:
        return f"min_gpus ({gpus}) must not be greater than max_gpus ({max_gpus})"
    if gpus < 1:
        return "an elastic job needs at least 1 GPU (min_gpus >= 1)"
    if shared:
        return "an elastic job takes whole GPUs: drop gpu_memory or give a fixed gpus"
    if nodes > 1:
        return "an elastic job runs on one node: drop nodes or give a fixed gpus"
    if topology is not None:
        return "an elastic job cannot ask for topology: drop it or give a fixed gpus"
    return None


def size_env(elastic_range: tuple[int, int] | None, gpus: int) -> dict[str, str]:
    """``WORLD_SIZE``: ``gpus``, the number of GPUs an elastic job (``elastic_range`` set) got
    this attempt; ``{}`` for a fixed count (``GPUDOCK_GPUS`` lists every job's GPU uuids)."""
    if elastic_range is None:
        return {}
    return {"WORLD_SIZE": str(gpus)}
