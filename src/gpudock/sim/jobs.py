"""A replay's job state and the small value helpers the engine's hot paths use.

``SimConfig`` (the simulated world's knobs), ``Progress`` (what a display is
told), ``_Job`` (one trace job's mutable state during a run), the event kinds,
and positional copies of snapshot types (``_running_view``, ``_with_gpus``,
``_with_priority``) that tests pin to their keyword forms.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gpudock.scheduler.snapshot import (
    GpuView,
    JobRequest,
    NodeView,
    Placement,
    RunningJob,
)
from gpudock.sim.traces import TraceJob

ARRIVE, FINISH, RELEASED, TICK = 0, 1, 2, 3  # event kinds; at equal times, arrivals first
REPRIORITIZE_EVERY = 30.0  # seconds: the shortest refresh period of a dynamic priority
SWEEP_GAP = 120.0  # seconds: a job this soon after the previous one of its class joins its sweep
GC_YOUNG = 50_000  # allocations between collections of the youngest generation during a run
_ACTIVE = frozenset({"pending", "running", "stopping"})


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Knobs of the simulated world (not of the policy).

    ``cycle_interval``: 0 runs a cycle at every instant with events (the
    server also wakes on every submission and completion); a positive value
    batches events into periods, as the server's ``schedule_interval`` does.
    ``restart_overhead``: seconds of work each restart redoes (the container
    starts, the model loads again); ``checkpoint_interval``: a job checkpoints
    every so many seconds of a run and a preemption loses the run since the
    last one (None: it loses nothing more). A trace job may set either for
    itself (``TraceJob``). The scheduler is told what each restart costs.
    """

    cycle_interval: float = 0.0
    preempt_grace: float = 10.0
    restart_overhead: float = 0.0
    checkpoint_interval: float | None = None
    horizon: float | None = None  # stop at this virtual time; None: when all jobs end
    seed: int = 0  # nonzero: jobs submitted at the same instant arrive in a seeded random order


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a replay is, for a display (``simulate(..., progress=fn)``); the engine
    draws nothing itself."""

    sim_time: float  # the virtual clock, seconds from the trace's first submission
    finished: int  # jobs finished so far
    total: int  # jobs in the replay (those that can never run are skipped, not counted)
    wall: float  # seconds of real time since the replay started
    done: bool = False  # the last call, once the replay has ended


ProgressFn = Callable[[Progress], None]


@dataclass(slots=True)
class _Job:
    """One trace job's mutable state during a run."""

    trace: TraceJob
    request: JobRequest
    remaining: float  # seconds of work left
    state: str = "future"  # future, pending, running, stopping, done, skipped
    parts: tuple[Placement, ...] = ()
    attempt_start: float = 0.0
    version: int = 0  # invalidates stale FINISH events
    first_start: float | None = None
    end: float | None = None
    preemptions: int = 0
    service: float = 0.0  # GPU-seconds held while running
    ran: float = 0.0  # seconds run over all attempts (attained service)
    preempted_for: int | None = None
    running_views: tuple[RunningJob, ...] = ()  # its snapshot entries (one per node); () stale
    priority: int = 0  # its scheduler priority now (``request``'s is brought up to it when pending)
    klass: tuple[str, float] = ("", 0.0)  # dynamic priorities: its estimator class
    reprioritize_at: float = -math.inf  # dynamic priorities: next recomputation
    rank: float = 0.0  # dynamic priorities: the last remaining time computed
    rank_from: float = math.inf  # ... which holds for attained times from this
    rank_until: float = -math.inf  # ... up to (not including) this
    rank_version: int = -1  # ... while its class's estimator ``version`` is this
    ranked_as: float = math.nan  # the remaining time its ``priority`` was computed from
    sibling: float | None = None  # siblings: the run time of its close sibling, if finished
    before: int = 0  # siblings: the number of the job before it in its sweep (0: none)
    after: int = 0  # siblings: ... and of the job after it
    place: int = 0  # siblings: its index in its class's jobs in submission order
    shown: int | None = None  # siblings: a running job's priority held down by its sweep
    granted: int = 0  # elastic: the GPUs its current attempt got (0: not elastic, or idle)
    overhead: float = 0.0  # seconds of work each of its restarts redoes
    restart_cost: float = 0.0  # what the scheduler is told a restart costs it (stop included)
    checkpoint: float | None = None  # it checkpoints every so many seconds of a run
    owed: float = 0.0  # work of its current (or next) run that redoes what a stop lost
    wasted: float = 0.0  # seconds it ran redoing lost work (finished runs)
    lost: float = 0.0  # GPU-seconds lost to its stops: held without progress, and redone
    estimated_end: float | None = None  # dynamic priorities: when its rank says it ends

    @property
    def gpus(self) -> float:
        """The GPUs it holds while running: an elastic job's grant, else the trace's."""
        if self.granted:
            return float(self.granted)
        return self.trace.total_gpus

    @property
    def speed(self) -> float:
        """Work done per second: an elastic job on ``granted`` GPUs runs ``granted /
        num_gpus`` times as fast as on its minimum (linear scaling); else 1."""
        return self.granted / self.trace.num_gpus if self.granted else 1.0

    def attained(self, now: float) -> float:
        """Seconds it has run doing new work (its attained service, what ranks read): the
        time it ran, less the time spent redoing what its stops lost."""
        if self.state != "running":
            return self.ran - self.wasted
        run = now - self.attempt_start
        speed = self.speed
        redo = min(self.owed, run * speed) / speed
        return self.ran + run - self.wasted - redo

    def owed_at(self, now: float) -> float:
        """Seconds of lost work it still has to redo at ``now``."""
        if self.state != "running" or not self.owed:
            return self.owed
        speed = self.speed
        return max(0.0, self.owed - (now - self.attempt_start) * speed) / speed


def _shuffle_ties(jobs: Sequence[TraceJob], seed: int) -> list[TraceJob]:
    """``jobs`` with each group submitted at the same instant shuffled (seeded)."""
    rng = random.Random(seed)
    out: list[TraceJob] = []
    group: list[TraceJob] = []
    for job in [*jobs, None]:
        if job is None or (group and job.submit_time != group[0].submit_time):
            rng.shuffle(group)
            out.extend(group)
            group = []
        if job is not None:
            group.append(job)
    return out


def _running_view(job: _Job, part: Placement) -> RunningJob:
    """The snapshot entry of a running (or stopping) job's ``part``, as the store shows it.

    Positional, without keyword matching: a long replay makes one per priority change
    of a running job, over a million (compiled, ``RunningJob`` is a native class and
    this is a C call). A test pins it to the keyword form, field by field."""
    request = job.request
    trace = job.trace
    return RunningJob(
        request.id,
        request.queue,
        job.priority if job.shown is None else job.shown,  # not ``request``'s
        part.node,
        part.gpu_uuids,
        part.memory_per_gpu,
        job.attempt_start,
        request.submitted_at,
        request.max_runtime,
        None,
        True,
        job.state == "stopping",
        job.preempted_for,
        "",
        request.cpus,
        (trace.num_gpus, trace.max_gpus)
        if trace.elastic_restart and trace.max_gpus is not None
        else None,
        request.memory,
        job.restart_cost,
        job.checkpoint,
        None,
        job.estimated_end,
        part.mig,
    )


def _with_gpus(view: NodeView, gpus: tuple[GpuView, ...], used_cpus: float) -> NodeView:
    """``replace(view, gpus=gpus, used_cpus=used_cpus)``, without ``dataclasses.replace``'s
    introspection (a Plan's every start and end makes one). A test pins it to ``replace``."""
    v = view
    if v.migs:  # the rare node with MIG devices keeps them
        return replace(v, gpus=gpus, used_cpus=used_cpus)
    return NodeView(
        v.name, gpus, v.available, v.unavailable_reason, v.labels, v.taints, v.cpus, used_cpus
    )


def _with_priority(
    request: JobRequest, priority: int, remaining: float | None = None
) -> JobRequest:
    """``replace(request, priority=priority, remaining=remaining)`` without
    ``dataclasses.replace``, which introspects the fields on every call: dynamic policies
    change hundreds of thousands of priorities in a long replay. A test pins it to
    ``replace``."""
    r = request
    return JobRequest(
        r.id,
        r.gpus,
        r.submitted_at,
        r.gpu_memory,
        r.gpu_model,
        priority,
        r.queue,
        r.user,
        r.nodes,
        r.cpus,
        r.max_runtime,
        r.can_preempt,
        r.node_selector,
        r.tolerations,
        r.topology,
        r.memory,
        r.held_by,
        r.max_gpus,
        remaining,
        r.mig,
        r.gpu_compute,
        r.cuda_require,
    )


def _label(queue: str) -> str:
    """A queue name as a label value (labels allow fewer characters than queue names)."""
    cleaned = "".join(c if c.isalnum() or c in "_.-" else "-" for c in queue)[:63].strip("-_.")
    return cleaned or "q"


def _largest_remainder(weights: Sequence[float], total: int) -> list[int]:
    """Split ``total`` whole units in proportion to ``weights``; sums to ``total`` exactly."""
    weight_sum = sum(weights)
    if weight_sum <= 0:
        weights, weight_sum = [1.0] * len(weights), float(len(weights))
    exact = [w * total / weight_sum for w in weights]
    counts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts
