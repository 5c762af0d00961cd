"""MIG profiles: their names, where each may sit on a GPU, and what a job may ask.

A MIG GPU instance takes ``size`` of the GPU's 8 memory slices, starting at
one of the profile's valid ``starts``, and ``compute`` of its 7 compute
slices. The table is NVIDIA's, from the *MIG User Guide*, "Supported MIG
Profiles" (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/), the
placements as ``nvidia-smi mig -lgipp`` prints them (``{0,2,4,6}:2`` is starts
0, 2, 4 and 6, two slices each). ``docs/operations.md`` shows the same table.

A profile name is ``<compute>g.<memory>gb`` with an optional ``+me`` (the
media extensions: the GPU's only decoders, so one per GPU). A job asks for one
MIG device by profile name (``mig: 1g.10gb``); phase B of the sharing issue
places such jobs, and ``gpudock mig plan`` suggests layouts for them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpudock.core.inventory import gpu_model_matches

MEMORY_SLICES = 8
COMPUTE_SLICES = 7
PROFILE_PATTERN = r"^[1-7]g\.[1-9][0-9]{0,3}gb(\+me)?$"
_PROFILE_RE = re.compile(PROFILE_PATTERN)
_COMPUTE_RE = re.compile(r"([1-9][0-9]*)g\.")
_MEMORY_RE = re.compile(r"\.([0-9]+)gb")


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU instance profile of one GPU model."""

    name: str  # e.g. "3g.40gb"
    compute: int  # compute slices (of 7)
    size: int  # memory slices (of 8)
    starts: tuple[int, ...]  # valid first memory slice


@dataclass(frozen=True, slots=True)
class MigModel:
    """A MIG-capable GPU model: ``matches`` is a ``gpu_model_matches`` pattern."""

    matches: str
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


def _model(matches: str, memory: tuple[int, int, int, int, int]) -> MigModel:
    """The layout every A100/H100/H200 shares, with its memory sizes in GB:
    (1 slice, 2 slices, 2g, 3g/4g, 7g)."""
    one, two, two_g, half, full = memory
    return MigModel(
        matches,
        (
            MigProfile(f"1g.{one}gb", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
            MigProfile(f"1g.{one}gb+me", 1, 1, (0, 1, 2, 3, 4, 5, 6)),
            MigProfile(f"1g.{two}gb", 1, 2, (0, 2, 4, 6)),
            MigProfile(f"2g.{two_g}gb", 2, 2, (0, 2, 4)),
            MigProfile(f"3g.{half}gb", 3, 4, (0, 4)),
            MigProfile(f"4g.{half}gb", 4, 4, (0,)),
            MigProfile(f"7g.{full}gb", 7, 8, (0,)),
        ),
    )


MIG_MODELS: tuple[MigModel, ...] = (
    _model("A100-40GB", (5, 10, 10, 20, 40)),
    _model("A100", (10, 20, 20, 40, 80)),  # the 80GB A100s (40GB ones matched above)
    _model("H100 NVL", (12, 24, 24, 47, 94)),
    _model("GH200", (12, 24, 24, 48, 96)),
    _model("H100", (10, 20, 20, 40, 80)),
    _model("H200", (18, 35, 35, 71, 141)),
)
"""MIG-capable models, most specific first (the first match wins)."""


def mig_model(gpu_name: str) -> MigModel | None:
    """The MIG table of a GPU by its product name, or None (no MIG, or not known).

    ``NVIDIA A100-SXM4-40GB`` gets the 40 GB table, ``NVIDIA A100 80GB PCIe``
    the 80 GB one, ``NVIDIA H100 80GB HBM3`` the H100's, ``NVIDIA H200`` the
    H200's; an emulated ``NVIDIA H100-80GB (emulated)`` the H100's too.
    """
    for model in MIG_MODELS:
        if gpu_model_matches(model.matches, gpu_name):
            return model
    return None


def compute_slices(profile: str) -> int:
    """How many of its GPU's ``COMPUTE_SLICES`` a device of ``profile`` takes: the ``<n>g``
    of its name (``3g.40gb``: 3), as NVIDIA names every profile (the table agrees). What
    a MIG job counts against quotas (``queue/resources.py``: ``mig_usage``); a name
    without it (not a profile name) counts the whole GPU."""
    match = _COMPUTE_RE.match(profile)
    return min(int(match[1]), COMPUTE_SLICES) if match else COMPUTE_SLICES


def profile_memory(profile: str) -> int:
    """At least the memory of a device of ``profile``, in bytes: its name's ``<n>gb`` read
    as GiB (NVIDIA's devices hold a little less: ``1g.10gb`` about 9.75 GiB); 0 for a name
    without it."""
    match = _MEMORY_RE.search(profile)
    return int(match[1]) * 2**30 if match else 0


def profile_syntax_problem(name: str) -> str | None:
    """Why ``name`` is not a MIG profile name (``1g.10gb``, ``7g.80gb``, ``1g.10gb+me``)."""
    if _PROFILE_RE.fullmatch(name):
        return None
    return (
        f"mig {name!r} is not a MIG profile name; use one such as 1g.10gb or 3g.40gb "
        "(compute slices 'g', memory 'gb', optionally '+me')"
    )


def mig_request_problem(mig: str, gpus: int, gpu_memory: int | None) -> str | None:
    """Why a job may not ask for MIG device ``mig`` with ``gpus`` GPUs and ``gpu_memory``.

    A MIG job holds exactly one MIG device: ``gpus`` must be 1 (or left at its
    default, which a MIG job reads as 1) and ``gpu_memory`` unset, since the
    device's memory is the profile's. None when the request is sound.
    """
    if (problem := profile_syntax_problem(mig)) is not None:
        return problem
    if gpus > 1:
        return f"mig asks for one {mig} device; it cannot be combined with gpus: {gpus}"
    if gpu_memory is not None:
        return (
            f"mig {mig} has its own memory; leave gpu_memory out (a memory share and a "
            "MIG device are two ways to share a GPU, a job takes one)"
        )
    return None


def known_profiles(gpu_names: Iterable[str], discovered: Iterable[str] = ()) -> set[str]:
    """Every profile name NVML reports (``discovered``) or that a GPU of ``gpu_names``
    supports by NVIDIA's table: what a job may ask for on this cluster."""
    known = set(discovered)
    for name in gpu_names:
        if (model := mig_model(name)) is not None:
            known.update(p.name for p in model.profiles)
    return known


def unknown_profile_problem(mig: str, known: set[str]) -> str | None:
    """Why ``mig`` names no profile this cluster has; None when one has it."""
    if mig in known:
        return None
    have = ", ".join(sorted(known, key=_profile_order)) or "none (no MIG-capable GPU)"
    return f"mig {mig!r} is not a profile any node's GPUs offer; known profiles: {have}"


def _profile_order(name: str) -> tuple[int, int, str]:
    match = re.match(r"(\d+)g\.(\d+)gb", name)
    return (int(match[1]), int(match[2]), name) if match else (99, 0, name)


@dataclass(frozen=True, slots=True)
class Placed:
    """A profile put at ``start`` (its first memory slice)."""

    profile: MigProfile
    start: int


def fits(layout: Iterable[Placed], profile: MigProfile) -> int | None:
    """The lowest valid start where ``profile`` fits beside ``layout``, or None.

    A start fits when the profile's memory slices are all free and the compute
    slices in use stay at most 7. This is how the driver places a new GPU
    instance when no placement is given.
    """
    placed = list(layout)
    if sum(p.profile.compute for p in placed) + profile.compute > COMPUTE_SLICES:
        return None
    if profile.name.endswith("+me") and any(p.profile.name.endswith("+me") for p in placed):
        return None  # one media-extension instance per GPU
    used = {p.start + i for p in placed for i in range(p.profile.size)}
    for start in profile.starts:
        if all(start + i not in used for i in range(profile.size)):
            return start
    return None
