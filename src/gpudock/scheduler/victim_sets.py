"""Step 5's victim sets and what one costs: shared by the definition and its accelerators.

A ``VictimSet`` is the running jobs to stop on one node. Sets are compared by
``cost_of``, lowest first; a running job is a candidate only while it is
``preemptible_now`` (``preemption_rules.py``, rule 1: not protected).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudock.scheduler.preemption_rules import DEFAULT_RULES, PreemptionRules
from gpudock.scheduler.snapshot import RunningJob

Cost = tuple[float, int, float, str]  # (top priority, victims, seconds lost, node)


@dataclass(frozen=True, slots=True)
class VictimSet:
    node: str
    victims: tuple[RunningJob, ...]

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(v.id for v in self.victims)


def preemptible_now(victim: RunningJob, now: float, rules: PreemptionRules = DEFAULT_RULES) -> bool:
    """Not stopping already, preemptible, and not protected (``rules.protected``: past
    its ``min_runtime`` and the cluster's ``exempt_time`` since it last started)."""
    if victim.stopping or not victim.preemptible:
        return False
    return not rules.protected(victim, now)


def cost_of(victims: Sequence[RunningJob], node: str, now: float) -> Cost:
    """Lowest first: top victim priority, fewest victims, least work lost, node name."""
    return (
        float(max(v.priority for v in victims)),
        len(victims),
        sum(now - v.started_at for v in victims if v.started_at is not None),
        node,
    )


def seconds_run(victim: RunningJob, now: float) -> float:
    """The work a victim loses: how long it has run (0 before it starts)."""
    return now - victim.started_at if victim.started_at is not None else 0.0
