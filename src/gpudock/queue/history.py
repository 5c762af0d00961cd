"""Historical usage with exponential decay (Slurm multifactor's half-life).

``UsageHistory`` keeps, per queue, the *decayed average usage* ``A``: the
usage integrated over time with weight ``0.5 ** (age / half_life)``,
normalised so that a constant usage ``u`` held forever gives ``A = u``.
Integrating a usage ``u`` that held for ``dt`` seconds is, exactly::

    d = 0.5 ** (dt / half_life)
    A' = d * A + (1 - d) * u

So old usage halves every half-life: 8 GPUs held for one half-life from
nothing gives ``A = 4``; then one idle half-life gives ``A = 2``. The decayed
integral itself (e.g. decayed GPU-seconds) is ``A * half_life / ln 2``.

Pure data: ``advance`` returns a new history and reads no clock (``now``
comes from the caller, e.g. ``Snapshot.now``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpudock.queue.resources import RESOURCES, Resources

FloatVector = tuple[float, float, float]  # in ``RESOURCES`` order
ZERO_VECTOR: FloatVector = (0.0, 0.0, 0.0)
_NEGLIGIBLE = 1e-6  # below this in every component (GPUs, bytes, cores) an entry is dropped


def as_floats(usage: Resources) -> FloatVector:
    """``usage`` as floats in ``RESOURCES`` order."""
    return (float(usage.gpus), float(usage.gpu_memory), float(usage.cpus))


@dataclass(frozen=True, slots=True)
class UsageHistory:
    """Decayed average usage per queue, as of ``updated_at``.

    ``averages`` maps a queue name to its decayed average usage (GPUs, bytes
    of GPU memory, CPU cores). Treat it as immutable.
    """

    half_life: float
    updated_at: float | None = None
    averages: Mapping[str, FloatVector] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.half_life > 0:
            raise ValueError(f"half_life must be greater than zero, got {self.half_life}")

    def advance(self, now: float, usage: Mapping[str, Resources]) -> UsageHistory:
        """The history at ``now``, given that ``usage`` held since ``updated_at``.

        Pass each queue's usage at ``now`` (its running jobs): between two
        calls usage is taken as constant at the later value. The first call
        only sets ``updated_at``. A ``now`` not after ``updated_at`` returns
        ``self``: time never runs backwards here. Queues missing from
        ``usage`` decay as idle; negligible entries are dropped.
        """
        if self.updated_at is None:
            return replace(self, updated_at=now)
        elapsed = now - self.updated_at
        if elapsed <= 0:
            return self
        keep = decay_factor(elapsed, self.half_life)
        averages: dict[str, FloatVector] = {}
        for name in sorted(set(self.averages) | set(usage)):
            current = as_floats(usage.get(name, Resources()))
            vector = blend(self.average(name), current, keep)
            if max(vector) >= _NEGLIGIBLE:
                averages[name] = vector
        return UsageHistory(self.half_life, now, averages)

    def average(self, queue: str) -> FloatVector:
        """``queue``'s decayed average usage; zeros when it has none."""
        return self.averages.get(queue, ZERO_VECTOR)

    def integral(self, queue: str) -> FloatVector:
        """``queue``'s decayed integral of usage (GPU-seconds, byte-seconds, CPU-seconds)."""
        scale = self.half_life / math.log(2)
        a, b, c = self.average(queue)
        return (a * scale, b * scale, c * scale)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe form for the store; ``from_dict`` reads it back."""
        return {
            "half_life": self.half_life,
            "updated_at": self.updated_at,
            "averages": {q: dict(zip(RESOURCES, v, strict=True)) for q, v in self.averages.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UsageHistory:
        averages = {
            q: (float(v["gpus"]), float(v["gpu_memory"]), float(v["cpus"]))
            for q, v in data.get("averages", {}).items()
        }
        return cls(float(data["half_life"]), data.get("updated_at"), averages)


def decay_factor(elapsed: float, half_life: float) -> float:
    """The weight left on usage ``elapsed`` seconds old: ``0.5 ** (elapsed / half_life)``."""
    factor: float = 0.5 ** (elapsed / half_life)
    return factor


def blend(old: FloatVector, current: FloatVector, keep: float) -> FloatVector:
    """``keep * old + (1 - keep) * current``, per resource."""
    a, b, c = (keep * o + (1.0 - keep) * u for o, u in zip(old, current, strict=True))
    return (a, b, c)
