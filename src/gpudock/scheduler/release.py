"""What a job could use on one node once some of the node's running jobs stop: exact and cheap.

``post_filter.node_after`` answers "what would ``node`` be once ``victims``
released what they hold?" by copying every GPU of the node. Preemption
(step 5) and the EASY reservation (step 3c) ask the capacity model's rules
(``rules.py``) about many victim sets on many nodes per cycle, so ``Release``
answers them, with the same result, from the GPUs the victims hold alone:
O(GPUs of the node) once per node and job, then O(GPUs the victims hold)
per question. It never mutates the node or its GPUs. ``pick`` (preemption's
greedy choice, ``post_filter.greedy_victims``) and ``first_fit`` (the EASY
shadow step) ask their sequences of questions adding or dropping one job at
a time. An accelerator's ``PostFilter`` answers the filters that declare these
rules with it (``accel/post_filter.py``).

``RunningOn`` keeps, per node, what the bounds of ``backfill.py`` and
``victims.py`` read of the running jobs there: their end times and how many
of the node's GPUs each holds.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING

from gpudock.scheduler.capacity import (
    AnyGpu,
    CycleState,
    matches_model,
    model_name_matches,
    usable_now,
)
from gpudock.scheduler.node_fit import NodeFit
from gpudock.scheduler.post_filter import greedy_victims
from gpudock.scheduler.snapshot import JobRequest, RunningJob
from gpudock.scheduler.topology import group_of

if TYPE_CHECKING:
    from gpudock.scheduler.running import RunningIndex

_EPSILON = 1e-9  # as in ``fits_after``


class Release:
    """``fits_after(job, node, victims)`` for one job and one node, without copying GPUs.

    It answers the capacity model's rules (``rules.py``): ``GPUS`` always (the GPUs that
    could ever take a share included); ``GPU_GROUP`` when ``group`` (and the job needs
    it); ``CPUS`` and ``HOST_MEMORY`` when the node counts them and they are given.
    ``gpus`` are the node's GPUs as they are now (its ``NodeState``'s, or its
    view's while it has not been copied: same fields, same answers);
    ``cpus``/``free_cpus`` the node's CPU count (None: not counted, or not checked) and
    free cores; ``memory``/``free_memory`` its host memory bytes (None: not counted, or
    not checked) and those free.
    """

    __slots__ = (
        "_by_uuid",
        "_cpus",
        "_ever",
        "_free_cpus",
        "_free_memory",
        "_gpus",
        "_group",
        "_job",
        "_memory",
        "usable",
    )

    def __init__(
        self,
        job: JobRequest,
        gpus: Sequence[AnyGpu],
        cpus: float | None,
        free_cpus: float,
        memory: int | None = None,
        free_memory: int = 0,
        group: bool = True,
    ) -> None:
        self._job = job
        self._gpus = gpus
        self._cpus = cpus
        self._free_cpus = free_cpus
        self._memory = memory
        self._free_memory = free_memory
        self._group = group and job.topology is not None and job.gpus >= 2
        by_uuid: dict[str, list[tuple[AnyGpu, bool]]] = {}  # each GPU, usable now or not
        usable = 0
        for gpu in gpus:
            now = usable_now(job, gpu)
            by_uuid.setdefault(gpu.uuid, []).append((gpu, now))
            usable += now
        self._by_uuid = by_uuid
        self.usable = usable  # GPUs the job could use now
        share = job.gpu_memory
        self._ever = True  # a share's GPUs are large enough (``rules.gpus_ever``)
        if share is not None and job.gpus > 0:
            large = [g for g in gpus if g.memory_total >= share and matches_model(job, g)]
            self._ever = len(large) >= job.gpus

    @classmethod
    def on(
        cls, job: JobRequest, state: CycleState, name: str, host: bool = True, group: bool = True
    ) -> Release:
        """The release for ``job`` on node ``name`` as ``state`` has it now; ``host`` False
        leaves CPUs and memory unchecked."""
        nodes, view = state.nodes, state.views[name]
        return cls(
            job,
            nodes.gpus_of(name),
            view.cpus if host else None,
            nodes.free_cpus_of(name),
            view.host_memory if host else None,
            nodes.free_host_memory_of(name),
            group,
        )

    def fits(self, victims: Sequence[RunningJob]) -> bool:
        """Would the job fit once ``victims`` (in this order) released what they hold?"""
        job = self._job
        if not self._ever or not self._host_fits(victims):
            return False
        released: dict[str, list[RunningJob]] = {}
        by_uuid = self._by_uuid
        for victim in victims:
            for uuid in victim.gpu_uuids:
                if uuid in by_uuid:
                    holders = released.get(uuid)
                    if holders is None:
                        released[uuid] = [victim]
                    else:
                        holders.append(victim)
        if self._group:
            return self._largest_group(released) >= job.gpus
        usable = self.usable
        for uuid, holders in released.items():
            for gpu, now in by_uuid[uuid]:
                usable += _usable_after(job, gpu, holders) - now
        return usable >= job.gpus

    def pick(self, candidates: Sequence[RunningJob]) -> list[RunningJob] | None:
        """``greedy_victims(self.fits, candidates)``, testing only the GPUs each step
        changes."""
        job = self._job
        if self._group or not self._ever:
            return greedy_victims(self.fits, candidates)
        if not candidates:
            return None
        released: dict[str, list[RunningJob]] = {}  # uuid -> its holders released, in order
        gained: dict[str, int] = {}  # uuid -> its GPUs usable once released, less those now
        usable = self.usable
        chosen: list[RunningJob] = []
        for victim in candidates:
            chosen.append(victim)
            usable = self._add(victim, usable, released, gained)
            if usable >= job.gpus and self._host_fits(chosen):
                break
        else:
            return None
        for victim in reversed(list(chosen)):
            trial = [v for v in chosen if v.id != victim.id]
            if not trial:
                continue
            changed = {
                uuid: [h for h in released[uuid] if h.id != victim.id]
                for v in chosen
                if v.id == victim.id
                for uuid in v.gpu_uuids
                if uuid in self._by_uuid
            }
            gains = {uuid: self._gain(uuid, holders) for uuid, holders in changed.items()}
            after = usable + sum(gains[u] - gained[u] for u in changed)
            if after >= job.gpus and self._host_fits(trial):
                chosen, usable = trial, after
                released.update(changed)
                gained.update(gains)
        return chosen

    def first_fit(self, jobs: Sequence[RunningJob]) -> int | None:
        """The fewest leading ``jobs`` whose release lets the job fit (0: it fits now), or None.

        ``fits(jobs[:k])`` for k = 0, 1, ..., adding one job's GPUs at a time.
        """
        job = self._job
        if self._group or not self._ever:
            return next((k for k in range(len(jobs) + 1) if self.fits(jobs[:k])), None)
        released: dict[str, list[RunningJob]] = {}
        gained: dict[str, int] = {}
        usable = self.usable
        if usable >= job.gpus and self._host_fits(()):
            return 0
        for k, running in enumerate(jobs, 1):
            usable = self._add(running, usable, released, gained)
            if usable >= job.gpus and self._host_fits(jobs[:k]):
                return k
        return None

    def _add(
        self,
        victim: RunningJob,
        usable: int,
        released: dict[str, list[RunningJob]],
        gained: dict[str, int],
    ) -> int:
        """``usable`` once ``victim`` too released its GPUs (``released``, ``gained`` updated)."""
        uuids = victim.gpu_uuids
        for uuid in set(uuids) if len(uuids) > 1 else uuids:
            if uuid in self._by_uuid:
                holders = released.setdefault(uuid, [])
                holders.extend([victim] * uuids.count(uuid))
                gain = self._gain(uuid, holders)
                usable += gain - gained.get(uuid, 0)
                gained[uuid] = gain
        return usable

    def _gain(self, uuid: str, holders: Sequence[RunningJob]) -> int:
        """How many more GPUs with ``uuid`` the job could use once ``holders`` released them."""
        if not holders:
            return 0
        job = self._job
        return sum(_usable_after(job, gpu, holders) - now for gpu, now in self._by_uuid[uuid])

    def _host_fits(self, victims: Sequence[RunningJob]) -> bool:
        """The CPU and host memory part of ``fits``: what is free now and what ``victims``
        hold covers what the job asks for, on a node that counts it."""
        job = self._job
        if job.cpus and self._cpus is not None:
            freed = sum(v.cpus or 0.0 for v in victims)
            if self._free_cpus + freed + _EPSILON < job.cpus:
                return False
        if job.memory and self._memory is not None:
            freed_memory = sum(v.memory or 0 for v in victims)
            if self._free_memory + freed_memory < job.memory:
                return False
        return True

    def _largest_group(self, released: Mapping[str, list[RunningJob]]) -> int:
        """``largest_group(usable_after(...), job.topology)``."""
        job = self._job
        assert job.topology is not None
        counts: dict[int, int] = {}
        for gpu in self._gpus:
            holders = released.get(gpu.uuid)
            ok = _usable_after(job, gpu, holders) if holders else usable_now(job, gpu)
            key = group_of(gpu, job.topology)
            if ok and key is not None:
                counts[key] = counts.get(key, 0) + 1
        return max(counts.values(), default=0)


def released_state(gpu: AnyGpu, holders: Sequence[RunningJob]) -> tuple[bool, int, int]:
    """``(exclusive, used_memory, shared_jobs)`` of ``gpu`` once ``holders`` (in order) released
    their part of it, as ``usable_after`` computes them."""
    exclusive, used, shared_jobs = gpu.exclusive, gpu.used_memory, gpu.shared_jobs
    for victim in holders:
        if victim.memory_per_gpu is None:
            exclusive, used = False, 0
        else:
            used = max(0, used - victim.memory_per_gpu)
            shared_jobs = max(0, shared_jobs - 1)
    return exclusive, used, shared_jobs


def _usable_after(job: JobRequest, gpu: AnyGpu, holders: Sequence[RunningJob]) -> bool:
    """``usable_now(job, gpu)`` once ``holders`` released their part of ``gpu``."""
    exclusive, used, shared_jobs = released_state(gpu, holders)
    if not gpu.healthy or exclusive:
        return False
    model = job.gpu_model
    if model is not None and not model_name_matches(model, gpu.name):
        return False
    share = job.gpu_memory
    if share is not None and job.gpus > 0:
        return gpu.memory_total - used >= share
    return shared_jobs == 0 and used == 0


def usable_bound(job: JobRequest, fit: NodeFit) -> int:
    """At least the GPUs ``job`` could use on a node now, from its ``ANY_MODEL`` fit.

    Whole GPUs: the healthy idle ones; shares: the healthy GPUs not held
    exclusively with the share free. A model constraint only lowers the count.
    """
    if job.gpu_memory is None or job.gpus == 0:
        return fit.idle_all
    share = job.gpu_memory
    count = 0
    for free in fit.frees:  # largest first
        if free < share:
            break
        count += 1
    return count


def releases_needed(usable: int, most: Sequence[int], gpus: int) -> int | None:
    """The fewest jobs whose release could let ``gpus`` GPUs be usable, or None if all cannot.

    ``usable`` bounds the GPUs usable now; ``most[k]`` how many GPUs the
    release of any k of the jobs can make usable (``most_freed``).
    """
    need = gpus - usable
    if need <= 0:
        return 0
    k = bisect_left(most, need)
    return None if k == len(most) else k


def most_freed(
    running: Sequence[RunningJob], gpus: Sequence[AnyGpu], unique: bool = False
) -> list[int]:
    """``most[k]``: at least how many of ``gpus`` any k of ``running`` hold (k = 0..n).

    A job's release can make usable only the GPUs carrying one of its uuids.
    ``unique``: no two GPUs share a uuid (then a job holds at most its uuids).
    """
    if unique or len({g.uuid for g in gpus}) == len(gpus):
        sizes = [len(r.gpu_uuids) for r in running]
    else:
        count: dict[str, int] = {}
        for gpu in gpus:
            count[gpu.uuid] = count.get(gpu.uuid, 0) + 1
        sizes = [sum(count.get(u, 0) for u in set(r.gpu_uuids)) for r in running]
    sizes.sort(reverse=True)
    return list(accumulate(sizes, initial=0))


@dataclass(slots=True)
class NodeJobs:
    """The running jobs on one node, their expected ends in order, and ``most_freed`` of them."""

    running: Sequence[RunningJob]
    ends: list[float]  # expected ends (``expected_end``), ascending
    order: list[int]  # the index in ``running`` of each end's job (ties: by id, then given order)
    most: list[int]

    def in_end_order(self) -> list[RunningJob]:
        return [self.running[i] for i in self.order]


class RunningOn:
    """The running jobs holding GPUs on each node (``index.holders``), with per-node
    summaries built on first use."""

    def __init__(self, index: RunningIndex) -> None:
        self.holders = index.holders
        self.now = index.now
        self._nodes = index.nodes
        self._jobs: dict[str, NodeJobs] = {}

    def first_end(self, node: str) -> float:
        """The earliest ``expected_end`` of a running job on ``node`` (inf when none)."""
        found = self._nodes.get(node)
        if found is None:
            return math.inf
        first, now = found.first_raw_end, self.now  # ``found.first_end(now)``, inlined
        return first if first > now else now

    def jobs(self, node: str, gpus: Sequence[AnyGpu], unique: bool = False) -> NodeJobs:
        """``node``'s summary; ``gpus`` are its GPUs (only their uuids are read), ``unique``
        whether all GPUs of the snapshot have distinct uuids."""
        jobs = self._jobs.get(node)
        if jobs is None:
            running = self.holders.get(node, ())
            now, inf = self.now, math.inf
            ends = [
                (
                    now  # expected_end, inlined: this runs for every running job
                    if r.stopping
                    else inf
                    if r.max_runtime is None or r.started_at is None
                    else max(now, r.started_at + r.max_runtime),
                    r.id,
                    i,
                )
                for i, r in enumerate(running)
            ]
            ends.sort()  # ties (same end and id): in the given order
            jobs = self._jobs[node] = NodeJobs(
                running,
                [e for e, _, _ in ends],
                [i for _, _, i in ends],
                most_freed(running, gpus, unique),
            )
        return jobs


def expected_end(job: RunningJob, now: float) -> float:
    """When a running job will have released its GPUs: now if stopping, else at its max_runtime."""
    if job.stopping:
        return now
    if job.max_runtime is None or job.started_at is None:
        return math.inf
    return max(now, job.started_at + job.max_runtime)
