"""The one feasibility question of every step: would the profile's filters admit a job on a
node as it would be once some jobs left? (kube-scheduler's PostFilter.)

Placement (step 3b) asks the filters about nodes as they are. Every other step asks the
same filters about a node as it would be:

* the EASY reservation (step 3c): once the running jobs that end first have ended;
* preemption, and blocked jobs taking back elastic jobs' GPUs (step 5): once the chosen
  victims stopped;
* elastic growth (step 6): with the job's own GPUs counted free;
* the submit-time check (``feasibility.py``): once every job there has gone.

No step has a rule of its own for "could the job fit there": a filter that rejects a node
is heard everywhere, whether it is built in or new. ``node_after`` is the node as it
would be (a copy; the cycle's ``NodeState`` is untouched) and ``emptied`` a node's view
with nothing running.

``PostFilter`` is the question as the steps ask it; ``FiltersAfter`` answers it by the
definition, the profile's filters on copies. An accelerator answers it faster
(``acceleration.Accelerator.post_filter``), with the same answers, from what the
policies declare (``declarations.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

from gpudock.scheduler.capacity import CycleState, NodeState
from gpudock.scheduler.framework import (
    SUCCESS,
    FilterPolicy,
    PlacementKey,
    Profile,
    Status,
    placement_key,
)
from gpudock.scheduler.snapshot import JobRequest, NodeView, RunningJob

__all__ = [
    "FiltersAfter",
    "PostFilter",
    "emptied",
    "first_rejection",
    "greedy_victims",
    "node_after",
]


def first_rejection(filters: Sequence[FilterPolicy], job: JobRequest, node: NodeState) -> Status:
    """The status of the first filter that rejects ``job`` on ``node``; ``SUCCESS`` when none
    does (filters run in order: the first failure wins)."""
    for policy in filters:
        status = policy.filter(job, node)
        if not status.ok:
            return status
    return SUCCESS


def node_after(node: NodeState, leaving: Sequence[RunningJob]) -> NodeState:
    """``node`` as it would be once ``leaving`` released what they hold: their GPUs (a whole
    GPU, or a share of one, by uuid), MIG devices, CPUs and host memory. A copy; ``node``
    is untouched."""
    released: dict[str, list[RunningJob]] = {}
    devices: set[str] = set()  # MIG devices they hold (usually none)
    for job in leaving:
        for uuid in job.gpu_uuids:
            released.setdefault(uuid, []).append(job)
        if job.mig is not None:
            devices.add(job.mig)
    gpus = []
    for gpu in node.gpus:
        holders = released.get(gpu.uuid)
        if holders:
            gpu = gpu.copy()
            for job in holders:
                if job.memory_per_gpu is None:
                    gpu.exclusive, gpu.used_memory = False, 0
                else:
                    gpu.used_memory = max(0, gpu.used_memory - job.memory_per_gpu)
                    gpu.shared_jobs = max(0, gpu.shared_jobs - 1)
        gpus.append(gpu)
    free_cpus, free_memory = node.free_cpus, node.free_host_memory
    if node.cpus is not None:
        free_cpus += sum(j.cpus or 0.0 for j in leaving)
    if node.host_memory is not None:
        free_memory += sum(j.memory or 0 for j in leaving)
    after = replace(node, gpus=tuple(gpus), free_cpus=free_cpus, free_host_memory=free_memory)
    if devices:
        after.migs = tuple(
            replace(m, held=False) if m.held and m.uuid in devices else m for m in node.migs
        )
    after.refresh()
    return after


def emptied(view: NodeView) -> NodeView:
    """``view`` with nothing running: every GPU idle, every MIG device free, every CPU and
    byte of memory free."""
    gpus = tuple(
        replace(g, used_memory=0, exclusive=False, shared_jobs=0)
        if g.used_memory or g.exclusive or g.shared_jobs
        else g
        for g in view.gpus
    )
    migs = tuple(replace(m, held=False) if m.held else m for m in view.migs)
    return replace(view, gpus=gpus, used_cpus=0.0, used_host_memory=0, migs=migs)


def greedy_victims(
    fits: Callable[[Sequence[RunningJob]], bool], candidates: Sequence[RunningJob]
) -> list[RunningJob] | None:
    """A minimal victim list among ``candidates`` (in victim order), or None if all of them
    do not suffice: 1. add candidates in order until ``fits``; 2. drop every victim the
    job does not need, in reverse order."""
    chosen: list[RunningJob] = []
    for victim in candidates:
        chosen.append(victim)
        if fits(chosen):
            break
    else:
        return None
    for victim in reversed(list(chosen)):
        trial = [v for v in chosen if v.id != victim.id]
        if trial and fits(trial):
            chosen = trial
    return chosen


class PostFilter(Protocol):
    """The profile's verdict on one node as it would be, for one cycle (module doc).

    Its answers read the cycle's ``CycleState`` as it is when asked (step 3c asks between
    reservations; step 5 after the last). Every accelerator's gives ``FiltersAfter``'s.
    """

    def admits_empty(self, job: JobRequest, name: str) -> bool:
        """Would the filters admit ``job`` on node ``name``'s snapshot view with nothing
        running there? The steps try only such nodes: no leaving jobs help elsewhere."""
        ...

    def fits_after(self, job: JobRequest, name: str, leaving: Sequence[RunningJob]) -> bool:
        """Would the filters admit ``job`` on node ``name`` once ``leaving`` released what
        they hold there?"""
        ...

    def first_fit(self, job: JobRequest, name: str, ending: Sequence[RunningJob]) -> int | None:
        """The fewest leading jobs of ``ending`` whose leaving lets ``job`` fit on ``name``
        (0: it fits now), or None: ``fits_after`` of ``ending[:k]``, k = 0, 1, ..."""
        ...

    def victims(
        self, job: JobRequest, name: str, candidates: Sequence[RunningJob]
    ) -> list[RunningJob] | None:
        """``greedy_victims`` on ``name`` with ``fits_after``: the victims, or None."""
        ...


class FiltersAfter:
    """``PostFilter`` by the definition: the profile's filters on a copy of the node."""

    def __init__(self, state: CycleState, profile: Profile) -> None:
        self._state = state
        self._filters = profile.filters
        self._empty: dict[tuple[PlacementKey, str], bool] = {}

    def admits_empty(self, job: JobRequest, name: str) -> bool:
        view = self._state.views[name]
        key = (placement_key(job), name)
        found = self._empty.get(key)
        if found is None:
            node = NodeState.from_view(emptied(view))
            found = self._empty[key] = first_rejection(self._filters, job, node).ok
        return found

    def fits_after(self, job: JobRequest, name: str, leaving: Sequence[RunningJob]) -> bool:
        node = self._state.nodes[name]
        if leaving:
            node = node_after(node, leaving)
        return first_rejection(self._filters, job, node).ok

    def first_fit(self, job: JobRequest, name: str, ending: Sequence[RunningJob]) -> int | None:
        for k in range(len(ending) + 1):
            if self.fits_after(job, name, ending[:k]):
                return k
        return None

    def victims(
        self, job: JobRequest, name: str, candidates: Sequence[RunningJob]
    ) -> list[RunningJob] | None:
        return greedy_victims(lambda leaving: self.fits_after(job, name, leaving), candidates)
