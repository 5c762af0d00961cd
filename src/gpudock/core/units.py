"""Parsing and formatting of byte sizes and durations.

Sizes accept binary (KiB, MiB, GiB, TiB) and decimal (KB, MB, GB, TB) suffixes,
single letters as Docker uses them (k, m, g, t = binary), and plain byte
counts. Durations accept ``90``, ``90s``, ``15m``, ``2h``, ``1d`` and
combinations such as ``1h30m``.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
SIZE_HELP = "a size such as 512MiB, 20GiB, 16GB or 1073741824 (bytes)"
MAX_SIZE = 2**63 - 1  # bytes: what Docker and the database hold (int64)

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
DURATION_HELP = "a duration such as 90s, 15m, 2h, 1h30m or 1d (a bare number is seconds)"


def parse_size(value: str | int | float) -> int:
    """Return ``value`` in bytes; raise ``ValueError`` naming what is accepted.

    Never raises anything else, whatever ``value`` is (lists, NaN, infinity and
    sizes above ``MAX_SIZE`` included): callers get input straight from users.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected {SIZE_HELP}, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError(f"size must be a finite number, got {value}")
        if value < 0:
            raise ValueError(f"size must not be negative, got {value}")
        amount = Fraction(value)
    else:
        match = _SIZE_RE.match(value)
        if not match:
            raise ValueError(f"expected {SIZE_HELP}, got {value!r}")
        number, unit = match.groups()
        factor = _SIZE_UNITS.get(unit.lower())
        if factor is None:
            raise ValueError(f"unknown size unit {unit!r} in {value!r}; expected {SIZE_HELP}")
        amount = Fraction(number) * factor  # exact: "9223372036854775807" stays that integer
    if amount > MAX_SIZE:
        raise ValueError(f"size {value!r} is too large; at most {MAX_SIZE} bytes")
    return math.floor(amount)


def format_size(num_bytes: int | None) -> str:
    """Format bytes with the largest binary unit that keeps the number >= 1."""
    if num_bytes is None:
        return "-"
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            text = f"{value:.1f}".rstrip("0").rstrip(".") if unit != "B" else str(int(value))
            return f"{text}{unit}"
        value /= 1024
    raise AssertionError("unreachable")


def parse_duration(value: str | int | float) -> float:
    """Return ``value`` in seconds; raise ``ValueError`` naming what is accepted.

    Never raises anything else, and never returns NaN or infinity (``"nan"``,
    ``"inf"`` and ``1e999`` are refused): callers get input straight from users.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected {DURATION_HELP}, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION_RE.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise ValueError(f"expected {DURATION_HELP}, got {value!r}") from None
            seconds = sum(float(n) * _DURATION_UNITS[u] for n, u in parts)
    if not math.isfinite(seconds):
        raise ValueError(f"duration must be a finite number of seconds, got {value!r}")
    if seconds < 0:
        raise ValueError(f"duration must not be negative, got {value!r}")
    return seconds


def format_duration(seconds: float | None) -> str:
    """Format seconds as ``1h02m``, ``3m05s`` or ``42s``."""
    if seconds is None:
        return "-"
    total = round(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"
