"""The strategies ``gpudock simulate`` compares, each a configuration of the real scheduler.

Every policy runs the same ``scheduler.run_cycle`` the server runs; a policy
only chooses its inputs:

=============  ==============================================================
``static``     each queue owns a fixed partition of nodes, as pinned devices
               do: nodes carry a ``gpudock.sim/partition`` label and jobs
               select their queue's partition (the ``node_affinity`` filter)
``fifo``       strict FIFO with head-of-line blocking (``scheduler.queueing``
               adds ``strict-fifo``, as a server's config would)
``priority``   priority order, EASY backfill, priority preemption
``fair-share`` declared queues: DRF order, quotas, borrowing and reclaim
``sjf-oracle`` shortest true duration first (oracle; non-preemptive)
``srtf-oracle`` shortest true remaining time first, preemptive (oracle)
``default``    smallest Gittins rank first, preemptive: ``1 / G(a)``, the
               effective remaining time of a job that has run ``a``
               seconds, from the Gittins index of the run times of
               finished jobs of its class (``estimate.py``; a job holding
               whole nodes: of its queue's jobs of every size); no access to
               true durations. No preemption margin (``hysteresis`` 1): the
               Gittins rule has none, and ranks within a priority step
               (about 1%) already tie. ``siblings``: each sweep (jobs of a
               class submitted close together) runs in submission order,
               and a finished close sibling scales a job's rank (engine
               ``_hold_sweeps``, estimator ``sibling``)
=============  ==============================================================

Dynamic priorities (``srtf-oracle``, ``default``) are recomputed before
each cycle and fed to the scheduler as job priorities, so ordering and
preemption use the scheduler's own priority rules; those policies put all
jobs in one scheduler queue (the trace's queue is kept for reporting), since
the scheduler preempts by priority only within a queue.

A YAML file may define a policy too::

    name: binpack-fair
    base: fair-share          # one of the names above
    scheduler:                # a gpudock server ``scheduler:`` section
      placement: spread

A policy's scheduler section is what a server would run, queueing strategies
included (``scheduler.queueing``); a file that sets no ``queueing`` keeps its base's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from pydantic import ValidationError

from gpudock.config import SchedulerConfig
from gpudock.queue.strategies import DEFAULT
from gpudock.scheduler.framework import OrderKey, Profile
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import JobRequest

PARTITION_LABEL = "gpudock.sim/partition"
PRIORITY_STEPS = 100  # remaining-time priorities per factor e: times within ~1% tie


@dataclass(frozen=True, slots=True)
class SimPolicy:
    """How one simulated run drives the scheduler.

    ``priority``: ``static`` (the trace's), ``srtf`` (true remaining time:
    oracle) or ``estimate`` (Gittins rank learnt from finished jobs).
    ``order``: ``priority`` (the profile's order) or ``sjf`` (true duration:
    oracle). ``queues``: use the cluster's declared queues (quotas, fair
    share, reclaim). ``partition``: static partitions per queue.
    ``scheduler``: the server config it runs, its queueing strategies included.
    """

    name: str
    description: str
    oracle: bool = False
    priority: str = "static"
    order: str = "priority"
    queues: bool = False
    partition: bool = False
    preemptive: bool = False
    hysteresis: float = 1.0  # a running job counts as this many times shorter (preempt margin)
    siblings: bool = False  # ``estimate`` only: keep sweeps in order, rank by close siblings
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)

    @property
    def strict(self) -> bool:
        """Strict FIFO: a queue's blocked head holds back its later jobs."""
        return "strict-fifo" in self.scheduler.queueing

    @property
    def dynamic(self) -> bool:
        """Priorities change as jobs run (recomputed each cycle)."""
        return self.priority in ("srtf", "estimate")

    def profile(self, durations: Callable[[int], float]) -> Profile:
        """The scheduler profile; ``durations(job_id)`` is read only by the ``sjf`` order."""
        profile = build_profile(self.scheduler)
        if self.order == "sjf":
            return replace(profile, order=ShortestJobFirst(durations))
        return profile


class ShortestJobFirst:
    """Order policy of the SJF oracle: shortest true duration, then submission, then id."""

    name = "sjf_oracle"

    def __init__(self, durations: Callable[[int], float]) -> None:
        self._durations = durations

    def key(self, job: JobRequest) -> OrderKey:
        return (self._durations(job.id), job.submitted_at, job.id)


POLICIES: dict[str, SimPolicy] = {
    p.name: p
    for p in (
        SimPolicy(
            "static",
            "each queue owns a fixed partition of nodes (pinned devices)",
            partition=True,
        ),
        SimPolicy(
            "fifo",
            "strict FIFO with head-of-line blocking",
            scheduler=SchedulerConfig(queueing=[*DEFAULT, "strict-fifo"]),
        ),
        SimPolicy("priority", "priority order with EASY backfill and priority preemption"),
        SimPolicy(
            "fair-share",
            "queues with DRF fair share, quotas, borrowing and reclaim",
            queues=True,
        ),
        SimPolicy(
            "sjf-oracle",
            "shortest true duration first (oracle: reads true durations)",
            oracle=True,
            order="sjf",
        ),
        SimPolicy(
            "srtf-oracle",
            "shortest true remaining time first, preemptive (oracle: reads true durations)",
            oracle=True,
            priority="srtf",
            preemptive=True,
        ),
        SimPolicy(
            "default",
            "smallest Gittins rank (effective remaining time) first, preemptive; "
            "learnt from finished jobs only",
            priority="estimate",
            preemptive=True,
            siblings=True,
        ),
    )
}


def remaining_priority(seconds: float) -> int:
    """A priority from a remaining time: shorter is higher.

    An integer, as the scheduler needs, on a log scale: remaining times
    within about 1% of each other tie (and then go by submission), so a
    running job's priority changes a few hundred times in its life, not
    every second, and near-equal jobs do not preempt each other.
    """
    return -round(PRIORITY_STEPS * math.log1p(seconds if seconds > 0.0 else 0.0))


def load_policy(spec: str) -> SimPolicy:
    """A policy by name, or from a YAML file (module doc); ``ValueError`` with a clear message."""
    if spec in POLICIES:
        return POLICIES[spec]
    path = Path(spec)
    if not (spec.endswith((".yaml", ".yml")) or path.is_file()):
        known = ", ".join(POLICIES)
        raise ValueError(f"unknown policy {spec!r} (known: {known}; or a YAML file)")
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"policy file {spec}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"policy file {spec}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except yaml.YAMLError as exc:
        raise ValueError(f"policy file {spec}: invalid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"policy file {spec}: expected a mapping with name, base, scheduler")
    unknown = sorted(set(data) - {"name", "base", "scheduler", "description"})
    if unknown:
        raise ValueError(f"policy file {spec}: unknown keys {', '.join(unknown)}")
    base_name = str(data.get("base", "default"))
    if base_name not in POLICIES:
        raise ValueError(f"policy file {spec}: unknown base {base_name!r}")
    base = POLICIES[base_name]
    try:
        scheduler = SchedulerConfig.model_validate(data.get("scheduler") or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"policy file {spec}: scheduler.{where}: {first['msg']}") from None
    if "queueing" not in scheduler.model_fields_set:
        scheduler = scheduler.model_copy(update={"queueing": list(base.scheduler.queueing)})
    name = str(data.get("name") or path.stem)
    description = str(data.get("description") or f"{base.description} ({path.name})")
    policy = replace(base, name=name, description=description, scheduler=scheduler)
    policy.profile(lambda _: 0.0)  # unknown policy names fail here, not mid-run
    return policy
