"""``gpudock mig plan``: a suggested MIG layout per GPU for the MIG devices jobs want.

::

    demand {profile: count}
      │ 1. idle MIG devices that exist already serve what they can (kept as they are)
      │ 2. GPUs free to re-lay: a MIG table (core/mig.py), no job on the GPU or its devices,
      │    no device of theirs serving step 1; GPUs already in MIG mode first
      │ 3. each such GPU, in turn: the largest profile still wanted that fits, again
      │    and again (the driver's own first-fit placement, so the commands give it)
      ▼
    MigPlan: per GPU the profiles and the nvidia-smi commands; what no GPU can serve

Pure: no I/O, no clock. gpudock never runs these commands; an admin does, on
the node, and discovery (a restart of the server or node agent) then reports
the new MIG devices.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpudock.core.mig import MigProfile, Placed, fits, mig_model


@dataclass(frozen=True, slots=True)
class PlanGpu:
    """What the planner knows of one GPU.

    ``busy``: a whole-GPU or share job holds it. ``idle_devices`` and
    ``busy_devices`` are the profiles of its MIG devices with no job and with
    one.
    """

    node: str
    index: int
    uuid: str
    name: str
    mig_mode: bool | None
    busy: bool = False
    idle_devices: tuple[str, ...] = ()
    busy_devices: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuLayout:
    """A suggested layout for one GPU and the commands that make it (run on its node)."""

    gpu: PlanGpu
    profiles: tuple[Placed, ...]
    commands: tuple[str, ...]


@dataclass(slots=True)
class MigPlan:
    """``layouts`` to make; ``kept``: idle devices that already serve ``{profile: n}``;
    ``unmet``: ``{profile: (count, why)}`` that no GPU can serve."""

    layouts: list[GpuLayout] = field(default_factory=list)
    kept: dict[str, int] = field(default_factory=dict)
    unmet: dict[str, tuple[int, str]] = field(default_factory=dict)


def plan_mig(gpus: Sequence[PlanGpu], demand: Mapping[str, int]) -> MigPlan:
    """The layouts that serve as much of ``demand`` as the GPUs free to change allow.

    Never proposes to change a GPU that holds a job, or one whose idle devices
    already serve some of the demand. Deterministic: GPUs are taken in
    (MIG mode first, node, index) order.
    """
    wanted = Counter({p: n for p, n in demand.items() if n > 0})
    plan = MigPlan()
    serving: set[str] = set()
    for gpu in gpus:
        for profile in gpu.idle_devices:
            if wanted[profile] > 0:
                wanted[profile] -= 1
                plan.kept[profile] = plan.kept.get(profile, 0) + 1
                serving.add(gpu.uuid)
    free = [g for g in gpus if _free_to_change(g) and g.uuid not in serving]
    free.sort(key=lambda g: (g.mig_mode is not True, g.node, g.index))
    for gpu in free:
        if not +wanted:
            break
        placed = _fill(gpu, wanted)
        if placed:
            plan.layouts.append(GpuLayout(gpu, tuple(placed), _commands(gpu, placed)))
    for profile, count in sorted((+wanted).items()):
        plan.unmet[profile] = (count, _why_unmet(profile, gpus, free))
    return plan


def _free_to_change(gpu: PlanGpu) -> bool:
    return mig_model(gpu.name) is not None and not gpu.busy and not gpu.busy_devices


def _fill(gpu: PlanGpu, wanted: Counter[str]) -> list[Placed]:
    """Place the largest wanted profile that fits, until none does; takes from ``wanted``."""
    model = mig_model(gpu.name)
    assert model is not None
    placed: list[Placed] = []
    while True:
        options = [p for p in model.profiles if wanted[p.name] > 0]
        options.sort(key=lambda p: (-p.size, -p.compute, p.name))
        for profile in options:
            start = fits(placed, profile)
            if start is not None:
                placed.append(Placed(profile, start))
                wanted[profile.name] -= 1
                break
        else:
            return placed


def _commands(gpu: PlanGpu, placed: list[Placed]) -> tuple[str, ...]:
    """The ``nvidia-smi`` commands, in order, that turn ``gpu`` into ``placed``."""
    i = gpu.index
    commands: list[str] = []
    if gpu.mig_mode is not True:
        commands.append(f"nvidia-smi -i {i} -mig 1")
        commands.append(f"nvidia-smi --gpu-reset -i {i}  # MIG mode takes effect after a reset")
    elif gpu.idle_devices:
        commands.append(f"nvidia-smi mig -i {i} -dci")
        commands.append(f"nvidia-smi mig -i {i} -dgi")
    names = ",".join(p.profile.name for p in placed)
    commands.append(f"nvidia-smi mig -i {i} -cgi {names} -C")
    return tuple(commands)


def _why_unmet(profile: str, gpus: Sequence[PlanGpu], free: Sequence[PlanGpu]) -> str:
    offered = [g for g in gpus if _offers(g, profile)]
    if not offered:
        return f"no GPU model here offers {profile}"
    if not any(_offers(g, profile) for g in free):
        return f"every GPU that offers {profile} holds jobs; plan again when they end"
    return f"not enough GPUs that offer {profile} are free to change"


def _offers(gpu: PlanGpu, profile: str) -> bool:
    model = mig_model(gpu.name)
    return model is not None and model.profile(profile) is not None


def describe(placed: Sequence[Placed]) -> str:
    """``3g.40gb@0 + 2g.20gb@4 + 1g.10gb@6``: the layout on one line."""
    return " + ".join(f"{p.profile.name}@{p.start}" for p in placed)


__all__ = ["GpuLayout", "MigPlan", "MigProfile", "PlanGpu", "describe", "plan_mig"]
