"""Estimated start times: the current queue replayed through the real scheduler.

``estimate_starts`` takes a server ``Snapshot`` (nodes, pending and running
jobs) and replays it on a virtual clock with the scheduler's own cycle
(``run_cycle`` as ``schedule`` runs it, with the config's queueing strategies,
without wording pending reasons)
and the gates' own ``gate`` (dependencies and array limits,
``queue/gates.py``)::

    t = snapshot.now
    loop:  gate the pending jobs → run_cycle(eligible) → start what it places at t
           next event: the earliest end of a running job, rounded up to
           ``RESOLUTION`` → t; free the GPUs of every job ended by then
    until every pending job has started, or no running job has a known end

Rounding the clock up to whole ``RESOLUTION`` steps (60 s) bounds the
cycles replayed (ends that close share one); an estimate is then late by
less than that, never early.

A running job ends ``max_runtime`` after it started (its bound), or after its
queue's default in ``defaults``; a job without either has no known end.
Each estimate says which it used (``basis``): ``now`` (it would start at
the next cycle), ``max_runtime``, ``queue_default``, or ``unknown`` (a
running job it waits behind has no bound; or no node could ever run it,
worded by the profile's filters, ``scheduler.feasibility``; or a dependency
will fail). Replayed jobs are assumed to run to their bound and succeed;
preemptions in a Plan are not applied. Pure: no I/O, never mutates the
snapshot, and it runs without the controller's ``SchedulerSession``.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from gpudock.config import SchedulerConfig
from gpudock.core.job import JobState
from gpudock.queue.gates import Gated, gate
from gpudock.scheduler.admission import QueuePolicy
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.feasibility import Refusal, never_fits
from gpudock.scheduler.framework import PlacementKey, placement_key
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import JobRequest, NodeView, Placement, RunningJob, Snapshot

Basis = Literal["now", "max_runtime", "queue_default", "unknown"]
MAX_STEPS = 256  # scheduling cycles one estimate replays at most
RESOLUTION = 60.0  # seconds: the replay's clock moves in whole steps of this


@dataclass(frozen=True, slots=True)
class StartEstimate:
    job_id: int
    start: float | None  # epoch seconds; None: unknown
    basis: Basis
    detail: str  # one line for humans; names no other user's job


@dataclass(frozen=True, slots=True)
class Gates:
    """The gate facts (``store/gates.py``): the pending jobs' dependencies and arrays,
    the states of the jobs they name, and the running tasks of their arrays."""

    gated: Mapping[int, Gated]
    states: Mapping[int, JobState]
    tasks: Mapping[int, int]  # running job id -> array id


class _Replay:
    """The replay's mutable state: nodes, running jobs with their ends, virtual states."""

    def __init__(self, snapshot: Snapshot, gates: Gates, defaults: Mapping[str, float]) -> None:
        self.t = self.origin = snapshot.now
        self.nodes = {n.name: n for n in snapshot.nodes}
        self.running: dict[int, RunningJob] = {r.id: r for r in snapshot.running}
        self.gates = gates
        self.states = dict(gates.states) | dict.fromkeys(self.running, JobState.RUNNING)
        self.tasks = dict(gates.tasks)
        self.unbounded = False  # a running job with no known end
        self.defaulted = False  # an end came from a queue default
        self.ends: dict[int, float] = {}
        self.defaults = defaults
        for job in snapshot.running:
            self._bound(job, job.started_at or snapshot.now, defaults)

    def _bound(self, job: RunningJob, started: float, defaults: Mapping[str, float]) -> None:
        limit = job.max_runtime
        if limit is None and job.queue in defaults:
            limit, self.defaulted = defaults[job.queue], True
        if limit is None:
            self.unbounded = True
            return
        self.ends[job.id] = max(self.t, started + limit)

    def active(self) -> dict[int, int]:
        counts: dict[int, int] = {}
        for array_id in self.tasks.values():
            counts[array_id] = counts.get(array_id, 0) + 1
        return counts

    def start(self, job: JobRequest, parts: tuple[Placement, ...]) -> None:
        for part in parts:
            self._take(part, job.cpus, job.memory, +1)
            view = RunningJob(
                id=job.id, queue=job.queue, priority=job.priority, node=part.node,
                gpu_uuids=part.gpu_uuids, memory_per_gpu=part.memory_per_gpu,
                started_at=self.t, submitted_at=job.submitted_at,
                max_runtime=job.max_runtime, user=job.user, cpus=job.cpus, memory=job.memory,
            )  # fmt: skip
            self.running[job.id] = view
        self.states[job.id] = JobState.RUNNING
        gated = self.gates.gated.get(job.id)
        if gated is not None and gated.array_id is not None:
            self.tasks[job.id] = gated.array_id
        self._bound(self.running[job.id], self.t, self.defaults)

    def advance(self, resolution: float) -> bool:
        """Move the clock to the next end (rounded up to ``resolution`` after the
        snapshot's time) and free what has ended by then; False if no end is known."""
        if not self.ends:
            return False
        steps = math.ceil((min(self.ends.values()) - self.origin) / resolution - 1e-9)
        self.t = max(self.t, self.origin + steps * resolution)
        for job_id in [i for i, end in self.ends.items() if end <= self.t]:
            del self.ends[job_id]
            job = self.running.pop(job_id)
            part = Placement(job_id, job.node, job.gpu_uuids, job.memory_per_gpu)
            self._take(part, job.cpus, job.memory, -1)
            self.states[job_id] = JobState.SUCCEEDED
            self.tasks.pop(job_id, None)
        return True

    def _take(self, part: Placement, cpus: float | None, memory: int | None, sign: int) -> None:
        """Take (``sign`` +1) or give back (-1) a part's GPUs, CPUs and host memory."""
        view = self.nodes[part.node]
        held = set(part.gpu_uuids)
        gpus = tuple(
            g.with_job(part.memory_per_gpu, sign) if g.uuid in held else g for g in view.gpus
        )
        used = max(0.0, view.used_cpus + sign * (cpus or 0.0)) if view.cpus is not None else 0.0
        held_memory = view.used_host_memory
        if view.host_memory is not None:
            held_memory = max(0, held_memory + sign * (memory or 0))
        self.nodes[part.node] = replace(
            view, gpus=gpus, used_cpus=used, used_host_memory=held_memory
        )

    def snapshot(self, pending: tuple[JobRequest, ...], base: Snapshot) -> Snapshot:
        nodes: tuple[NodeView, ...] = tuple(self.nodes.values())
        running = tuple(self.running.values())
        return replace(base, now=self.t, nodes=nodes, pending=pending, running=running)


def estimate_starts(
    snapshot: Snapshot,
    config: SchedulerConfig,
    gates: Gates | None = None,
    defaults: Mapping[str, float] | None = None,
    max_steps: int = MAX_STEPS,
    wanted: Collection[int] | None = None,
    resolution: float = RESOLUTION,
) -> dict[int, StartEstimate]:
    """An estimate for every pending job of ``snapshot`` (see the module docstring).

    With ``wanted``, the replay stops once those jobs have started (the others
    left then read ``unknown``). The replay's cycles share one private
    ``SchedulerSession`` (same Plans, less work), never the controller's.
    """
    replay = _Replay(snapshot, gates or Gates({}, {}, {}), defaults or {})
    pending = {j.id: j for j in snapshot.pending}
    waiting = set(pending if wanted is None else wanted) & set(pending)
    out: dict[int, StartEstimate] = {}
    session = SchedulerSession()
    profile = build_profile(config)  # as ``schedule`` does, once; no pending reasons worded
    queues = QueuePolicy.from_config(config.queues, snapshot.queue_history)
    for _ in range(max_steps):
        verdict = gate(list(pending), replay.gates.gated, replay.states, replay.active())
        for job_id, why in verdict.cancelled.items():
            out[job_id] = StartEstimate(job_id, None, "unknown", f"will be cancelled: {why}")
            del pending[job_id]
            waiting.discard(job_id)
            replay.states[job_id] = JobState.CANCELLED
        eligible = tuple(j for i, j in pending.items() if i not in verdict.excluded)
        if eligible:
            cycle = replay.snapshot(eligible, snapshot)
            plan = run_cycle(
                cycle,
                profile,
                queues=queues,
                queueing=config.queueing,
                explain=False,
                session=session,
            )
            started: list[tuple[int, tuple[Placement, ...]]]
            started = [(p.job_id, (p,)) for p in plan.placements]
            started += [(g.job_id, g.parts) for g in plan.gangs]
            for job_id, parts in started:
                replay.start(pending.pop(job_id), parts)
                out[job_id] = _known(job_id, replay, snapshot.now)
                waiting.discard(job_id)
        if not waiting or not replay.advance(resolution):
            break
    refusals: dict[PlacementKey, Refusal | None] = {}
    for job_id, job in pending.items():
        key = placement_key(job)
        if key not in refusals:
            refusals[key] = never_fits(job, snapshot.nodes, profile)
        found = refusals[key]
        if found is not None:
            detail = f"unknown: no node could ever run it: {found.message}"
            out[job_id] = StartEstimate(job_id, None, "unknown", detail)
        else:
            out[job_id] = _unknown(job_id, replay)
    return out


def _known(job_id: int, replay: _Replay, now: float) -> StartEstimate:
    if replay.t <= now:
        return StartEstimate(job_id, replay.t, "now", "can start at the next scheduling cycle")
    if replay.defaulted:
        detail = "running jobs end at their max_runtime or their queue's default"
        return StartEstimate(job_id, replay.t, "queue_default", detail)
    return StartEstimate(job_id, replay.t, "max_runtime", "running jobs end at their max_runtime")


def _unknown(job_id: int, replay: _Replay) -> StartEstimate:
    if replay.unbounded:
        detail = "unknown: a job it waits behind has no max_runtime"
    elif replay.ends:
        detail = "unknown: beyond the estimate's horizon"
    else:
        detail = "unknown: no running job's end makes room for it"
    return StartEstimate(job_id, None, "unknown", detail)
