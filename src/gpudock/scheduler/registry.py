"""The one registry of scheduling policies, and the profile built from config.

Every policy module in ``policies/`` is listed here once, by name, with its
factory (kube-scheduler's ``plugins/registry.go``). Which policies run, in
which order and with which weights, is configuration: ``profile_spec``
(kube-scheduler's ``default_plugins.go``). The cycle runs the policies of
the ``Profile`` built here and walks only the extension points; the
scheduler's mechanism imports no policy. How a policy may be accelerated is
what it declares (``declarations.py``): the accelerator named here reads
declarations, never classes.

To add a policy: write one module under ``policies/`` (a class with ``name``
and the methods of its ``framework`` Protocol) and add one line to its
section below; config then names it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, get_type_hints

from pydantic import TypeAdapter, ValidationError

from gpudock.config import SchedulerConfig
from gpudock.scheduler.accel.indexed import CapacityIndex
from gpudock.scheduler.acceleration import Accelerator
from gpudock.scheduler.framework import (
    FilterPolicy,
    GpuPicker,
    OrderPolicy,
    PreScorePolicy,
    Profile,
    ScorePolicy,
)
from gpudock.scheduler.policies.binpack import Binpack
from gpudock.scheduler.policies.cpu_capacity import CpuCapacity
from gpudock.scheduler.policies.cuda_compat import CudaCompat
from gpudock.scheduler.policies.fgd import Fgd, FgdPicker
from gpudock.scheduler.policies.fgd_adaptive import AdaptiveFgd, AdaptiveFgdPicker, LearnWorkload
from gpudock.scheduler.policies.gpu_capacity import GpuCapacity
from gpudock.scheduler.policies.gpu_health import GpuHealth
from gpudock.scheduler.policies.gpu_model import GpuModel
from gpudock.scheduler.policies.gpu_picker import BestFitPicker
from gpudock.scheduler.policies.gpu_sharing import GpuSharing
from gpudock.scheduler.policies.gpu_topology import GpuTopology
from gpudock.scheduler.policies.memory_capacity import MemoryCapacity
from gpudock.scheduler.policies.mig_capacity import MigCapacity
from gpudock.scheduler.policies.node_affinity import NodeAffinity
from gpudock.scheduler.policies.node_health import NodeHealth
from gpudock.scheduler.policies.priority_fifo import PriorityFifo
from gpudock.scheduler.policies.share_price.plugin import SharePrice
from gpudock.scheduler.policies.spread import Spread
from gpudock.scheduler.preemption_rules import PreemptionRules

ACCELERATOR: Callable[[], Accelerator] = CapacityIndex
"""The accelerator of steps 3b and 4 (``acceleration.py``); ``acceleration.Reference`` is the
generic path it must match."""
ORDER_POLICIES: Mapping[str, Callable[[], OrderPolicy]] = {
    PriorityFifo.name: PriorityFifo,
}
FILTER_POLICIES: Mapping[str, Callable[[], FilterPolicy]] = {
    NodeAffinity.name: NodeAffinity,
    GpuModel.name: GpuModel,
    GpuSharing.name: GpuSharing,
    CudaCompat.name: CudaCompat,
    NodeHealth.name: NodeHealth,
    GpuHealth.name: GpuHealth,
    CpuCapacity.name: CpuCapacity,
    MemoryCapacity.name: MemoryCapacity,
    GpuCapacity.name: GpuCapacity,
    GpuTopology.name: GpuTopology,
    MigCapacity.name: MigCapacity,
}
DEFAULT_FILTERS: tuple[str, ...] = tuple(FILTER_POLICIES)
"""The default filter order: "never" (unresolvable) checks first, then capacity, then topology."""
SCORE_POLICIES: Mapping[str, Callable[[], ScorePolicy]] = {
    Binpack.name: Binpack,
    Spread.name: Spread,
    Fgd.name: Fgd,
    AdaptiveFgd.name: AdaptiveFgd,
}
GPU_PICKERS: Mapping[str, Callable[[], GpuPicker]] = {
    BestFitPicker.name: BestFitPicker,
    FgdPicker.name: FgdPicker,
    AdaptiveFgdPicker.name: AdaptiveFgdPicker,
}
PRE_SCORE_POLICIES: Mapping[str, Callable[[], PreScorePolicy]] = {
    SharePrice.name: SharePrice,
    LearnWorkload.name: LearnWorkload,
}
DEFAULT_PRE_SCORERS: tuple[str, ...] = tuple(PRE_SCORE_POLICIES)
"""Every profile runs these (each does nothing for a profile it has no data for)."""

_SECTIONS: tuple[Mapping[str, object], ...] = (
    ORDER_POLICIES,
    FILTER_POLICIES,
    SCORE_POLICIES,
    GPU_PICKERS,
    PRE_SCORE_POLICIES,
)
REGISTRY: Mapping[str, object] = {name: f for section in _SECTIONS for name, f in section.items()}
"""Every policy factory by name; names are unique across extension points."""

assert len(REGISTRY) == sum(len(s) for s in _SECTIONS), "duplicate policy name"


T = TypeVar("T")


Options = tuple[tuple[str, bool | int | float | str], ...]
"""A score policy's keyword parameters from config, as ``(name, value)`` pairs."""

OPTION_TYPES: tuple[type, ...] = (bool, int, float, str)
"""The parameter types config can set: a policy's other parameters are not options."""


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    """Policy names per extension point; filters in run order (cheap and "never" first).

    ``scorers``: ``(name, weight, options)``. ``pre_scorers``: run once per cycle.
    """

    order: str
    filters: tuple[str, ...]
    scorers: tuple[tuple[str, float, Options], ...]
    picker: str
    pre_scorers: tuple[str, ...] = DEFAULT_PRE_SCORERS


def profile_spec(config: SchedulerConfig) -> ProfileSpec:
    """The profile ``config.policies`` names; the default for every part left unset.

    The default: priority then FIFO order; filters ``DEFAULT_FILTERS``
    (node_affinity, gpu_model, node_health, cpu_capacity, memory_capacity,
    gpu_capacity, gpu_topology); the ``config.placement`` scorer with weight 1; the
    topology-aware best-fit GPU picker. (``fgd_adaptive`` with
    ``fgd_adaptive_picker`` allocates more under GPU sharing but is named
    explicitly: the capacity index cannot answer for it, see
    ``scheduler/README.md``.)
    """
    chosen = config.policies
    return ProfileSpec(
        order=chosen.order or PriorityFifo.name,
        filters=tuple(chosen.filters) if chosen.filters is not None else DEFAULT_FILTERS,
        scorers=tuple((s.name, s.weight, tuple(sorted(s.options.items()))) for s in chosen.scorers)
        if chosen.scorers is not None
        else ((config.placement, 1.0, ()),),
        picker=chosen.picker or BestFitPicker.name,
    )


def _make(
    section: Mapping[str, Callable[..., T]], kind: str, name: str, options: Options = ()
) -> T:
    try:
        factory = section[name]
    except KeyError:
        known = ", ".join(sorted(section))
        raise ValueError(f"unknown {kind} policy {name!r} (known: {known})") from None
    return factory(**_checked(factory, f"{kind} policy {name!r}", options))


@functools.cache
def option_types(factory: Callable[..., object]) -> dict[str, type]:
    """The keyword parameters of ``factory`` that config may set, with their types: those
    annotated with one of ``OPTION_TYPES`` and given a default. Memoized (``schedule``
    builds its profile every cycle); do not change the result."""
    target: Callable[..., object] = factory
    if isinstance(factory, type):
        target = factory.__init__  # type: ignore[misc]  # the class's own, read for its hints
    hints = get_type_hints(target)
    return {
        name: hints[name]
        for name, param in inspect.signature(factory).parameters.items()
        if param.default is not inspect.Parameter.empty and hints.get(name) in OPTION_TYPES
    }


def _checked(factory: Callable[..., object], what: str, options: Options) -> dict[str, Any]:
    """``options`` as keyword arguments of ``factory``; ``ValueError`` naming the policy, the
    option and what it takes for an unknown option or a value of the wrong type."""
    if not options:
        return {}
    types = option_types(factory)
    out: dict[str, Any] = {}
    for key, value in options:
        if key not in types:
            known = ", ".join(sorted(types)) or "none"
            raise ValueError(f"{what} has no option {key!r} (options: {known})")
        expected = types[key]
        try:  # strict: YAML's ``yes`` is a bool already, and "1" is no number
            out[key] = TypeAdapter(expected).validate_python(value, strict=True)
        except ValidationError:
            raise ValueError(
                f"{what} option {key!r} takes a {expected.__name__}, got {value!r}"
            ) from None
    return out


def build_profile(config: SchedulerConfig, spec: ProfileSpec | None = None) -> Profile:
    """Instantiate the policies of ``spec`` (default: ``profile_spec(config)``).

    Raises ``ValueError`` naming the known policies for an unknown name.
    """
    spec = spec or profile_spec(config)
    filters = tuple(_make(FILTER_POLICIES, "filter", n) for n in spec.filters)
    if GpuCapacity.name not in spec.filters:
        raise ValueError(
            f"the {GpuCapacity.name} filter is required: without it GPUs would be over-committed"
        )
    scorers = tuple(
        (_make(SCORE_POLICIES, "score", name, options), weight)
        for name, weight, options in spec.scorers
    )
    picker = _make(GPU_PICKERS, "GPU picker", spec.picker)
    return Profile(
        order=_make(ORDER_POLICIES, "order", spec.order),
        filters=filters,
        scorers=scorers,
        picker=picker,
        pre_scorers=tuple(_make(PRE_SCORE_POLICIES, "pre-score", n) for n in spec.pre_scorers),
        preemption=preemption_rules(config),
    )


def preemption_rules(config: SchedulerConfig) -> PreemptionRules:
    """Step 5's rules (``preemption_rules.py``) from ``config.preemption``."""
    chosen = config.preemption
    return PreemptionRules(
        chosen.restart_cost, chosen.exempt_time, chosen.hysteresis, chosen.exempt_restarts
    )
