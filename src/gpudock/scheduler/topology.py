"""GPU topology within a node: NVLink domains and NUMA nodes, and sets that respect them.

A node's GPUs carry two optional group ids (``GpuView.nvlink``,
``GpuView.numa``), from NVML or the node's declared topology. GPUs with the
same NVLink id are all NVLink-connected (one NVSwitch fabric or one island);
GPUs with the same NUMA id hang off one CPU socket. ``None`` means unknown:
such a GPU belongs to no group.

``choose`` picks ``k`` GPUs out of the usable ones:

1. the smallest NVLink domain with ``k`` usable GPUs (best fit: larger
   domains stay whole for larger jobs), inside it the smallest NUMA node
   with ``k``, then the lowest indices;
2. else the smallest NUMA node with ``k`` usable GPUs;
3. else GPUs from the fewest domains (largest first).

A job's ``topology`` requirement puts its level first and makes it
mandatory (``None`` when impossible). With no topology data at all this is
exactly "the ``k`` lowest indices".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from gpudock.scheduler.capacity import AnyGpu, GpuState

Level = Literal["nvlink", "numa"]
LEVEL_WORDS: dict[str, str] = {"nvlink": "NVLink domain", "numa": "NUMA node"}


def group_of(gpu: AnyGpu, level: str) -> int | None:
    return gpu.nvlink if level == "nvlink" else gpu.numa


def groups(gpus: Sequence[GpuState], level: str) -> dict[int, list[GpuState]]:
    """GPUs by their group id at ``level``, each list in the given order; unknown left out."""
    out: dict[int, list[GpuState]] = {}
    for g in gpus:
        key = group_of(g, level)
        if key is not None:
            out.setdefault(key, []).append(g)
    return out


def largest_group(gpus: Sequence[AnyGpu], level: str) -> int:
    """The most GPUs of ``gpus`` in one group at ``level`` (0 when none has a group)."""
    counts: dict[int, int] = {}
    for g in gpus:
        key = group_of(g, level)
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
    return max(counts.values(), default=0)


def _tightest(gpus: Sequence[GpuState], level: str, k: int) -> list[GpuState] | None:
    fitting = [(len(v), key, v) for key, v in groups(gpus, level).items() if len(v) >= k]
    return min(fitting, key=lambda f: (f[0], f[1]))[2] if fitting else None


def choose(usable: Sequence[GpuState], k: int, required: str | None) -> list[GpuState] | None:
    """``k`` GPUs of ``usable`` (in preference order), by the rules of the module doc."""
    if len(usable) < k:
        return None
    if k == 0:
        return []
    if k == 1:
        required = None  # one GPU is always in one group
    if all(g.nvlink is None and g.numa is None for g in usable):
        return None if required else list(usable[:k])
    levels: tuple[str, str] = ("numa", "nvlink") if required == "numa" else ("nvlink", "numa")
    for i, level in enumerate(levels):
        group = _tightest(usable, level, k)
        if group is not None:
            inner = _tightest(group, levels[1 - i], k)
            return list((inner or group)[:k])
        if required == level:
            return None
    by_domain = groups(usable, "nvlink")
    ordered = sorted(by_domain.items(), key=lambda item: (-len(item[1]), item[0]))
    picked = [g for _, members in ordered for g in members]
    picked += [g for g in usable if g.nvlink is None]
    return picked[:k]
