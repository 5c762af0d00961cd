#!/usr/bin/env python3
"""Scheduler throughput and latency at scale, on an emulated cluster (no server, no I/O).

Two measurements of ``gpudock.scheduler.cycle.schedule``, timing only its calls:

* **drain**: ``--queued`` jobs wait on an empty cluster of ``--nodes`` x
  ``--gpus-per-node`` GPUs. Each cycle takes the first ``--per-cycle`` pending
  jobs in priority order (the server's ``MAX_PENDING_PER_CYCLE``), calls
  ``schedule()``, starts what was placed with a sampled duration, advances a
  virtual clock by ``--tick`` seconds (or to the next completion when nothing
  changed) and completes the jobs that ended, until the queue is empty.
  ``decisions_per_s`` = (placements + pending verdicts) / time in ``schedule()``.
* **latency**: ``--latency-cycles`` cycles of exactly 1000 queued jobs on the
  same cluster at three occupancies (empty, half full, full); p50/p99 in ms.

Running jobs (default; ``--no-running`` leaves them out, as the benchmark
first did): the snapshots carry the jobs that hold the busy GPUs, as the
server's ``load_snapshot`` does, so steps 3e-f (EASY reservation, backfill)
and 5 (preemption) do their real work. In **drain** they are the jobs the
benchmark placed (preemptions are applied: a victim stops within
``GRACE_S`` and returns to the queue); in **latency** they hold exactly what
the occupancy made busy: whole-GPU jobs of 1-8 GPUs, one shared job per
share. Running and pending jobs take the pending mix of priorities; 40%
declare a ``max_runtime``, a few running ones a ``min_runtime``, are not
preemptible or are already stopping.

Times are wall clock; ``*_cpu_*`` figures are this process's CPU time over
the same calls, steadier on a shared machine; ``*_gc_share`` is the part of
the time in ``schedule()`` spent in garbage-collector pauses. ``schedule()``
pauses the collector while it runs (``gpudock.gcpause.collector_paused``), so
``gc_between_cycles_ms`` reports the collections that run between the
latency cycles instead: the work is not hidden, and it is much smaller.

``--latency-cycles`` defaults to 300 (100 per occupancy), so that
``cycle_p99_ms`` is a 99th percentile (the 297th of 300) rather than the
slowest cycle, as with 60; ``cycle_max_ms`` is the slowest.

``reference_p50_ms`` / ``reference_p99_ms``: after each latency cycle the
benchmark times one fixed pure-Python workload (the same work every time, no
scheduler code), so ``reference_p99_over_p50`` is how far this machine alone
stretches the slow end of constant work during the run. On a shared machine
it is well above 1 and ``cycle_p99_ms`` moves with it; read the two together.

``--repeats N`` (default 3) runs the same latency cycles N times, the later
runs each in a fresh process (the same seeds: the same snapshots, cold
caches where the first run had them). ``cycle_p50_ms_best_of_runs`` /
``cycle_p99_ms_best_of_runs`` / ``cycle_max_ms_best_of_runs`` take each
cycle's fastest time over the N runs, timeit's convention: the work is the
same, so a slower run of a cycle measures what else the machine was doing.
The headline ``cycle_p50_ms`` / ``cycle_p99_ms`` stay those of the first run.

Job mix (seeded by ``--seed``): 70% whole-GPU jobs of 1/2/4/8 GPUs, 30% shared
jobs of 10-40GiB per GPU on 80GiB GPUs, ~8% with a GPU model constraint, a few
high-priority jobs. Nodes are 3/4 H100 and 1/4 A100, a few unavailable, a few
unhealthy GPUs. ``--cpus-per-gpu N`` (default 0: no CPUs) makes every node
count ``2N`` CPUs per GPU and every job ask ``N`` per GPU (running jobs too:
a node's used CPUs are ``N`` per exclusive GPU or share), so CPUs run out
before GPUs on nodes full of shares: the path of jobs asking for CPUs
(``indexed.CpuVerdicts``, binpack's CPU rule).

``--mig``: every third node's GPUs are in MIG mode (layouts of 1g.10gb x7, 3g.40gb x2,
4g.40gb+2g.20gb+1g.10gb, 2g.20gb x3+1g.10gb, in turn), and the mix is a fifth MIG jobs
(1g.10gb to 4g.40gb), a fifth shares, the rest whole GPUs; ``mig_ratio`` in the JSON
holds the drain's figures without ``--mig`` and with it, from the same run, and their
ratio.

``--extra-filter noop`` registers a filter the capacity index does not know (it declares
nothing, and admits every node) and appends it to the profile: the drain runs without
it, then with it, and ``extra_filter`` in the JSON holds both figures and their ratio (a
new policy's cost). ``--extra-filter half`` registers one that rejects half of the nodes
by a hash of their name ("not now", as a cordon). ``--extra-scorer noop`` registers a
scorer that declares nothing (every node scores 0) and adds it, weight 1, to the
placement scorer: ``extra_scorer`` holds the same figures for it.

Usage: ``benchmarks/scheduler_scale.py --nodes 1000 --gpus-per-node 8 --queued 100000 --json``;
``--profile`` prints the hottest functions of the schedule() calls to stderr
(pyinstrument when installed, else cProfile).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import gc
import heapq
import json
import math
import random
import resource
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from _meta import build_info

from gpudock.config import PoliciesConfig, SchedulerConfig, ScorerWeight
from gpudock.core.job import PendingReason
from gpudock.scheduler import registry
from gpudock.scheduler.capacity import CycleState, NodeState
from gpudock.scheduler.cycle import schedule
from gpudock.scheduler.framework import SUCCESS, FilterPolicy, Rejection, ScorePolicy, Status
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import (
    GpuView,
    JobRequest,
    MigView,
    NodeView,
    Placement,
    Plan,
    RunningJob,
    Snapshot,
)

GiB = 2**30
GPU_MEMORY = 80 * GiB
MODELS = ("NVIDIA H100 80GB HBM3",) * 3 + ("NVIDIA A100-SXM4-80GB",)  # by node index
WHOLE_GPUS = ((1, 0.45), (2, 0.25), (4, 0.18), (8, 0.12))
SHARES_GIB = (10, 16, 20, 24, 32, 40)
LATENCY_QUEUE = 1000
OCCUPANCIES = (("empty", 0.0), ("half", 0.5), ("full", 1.0))
PRIORITIES = ((0, 1, 10), (85, 10, 5))  # values, weights: pending and running jobs alike
MAX_RUNTIMES = (1800.0, 3600.0, 7200.0, 14400.0, 28800.0)
GRACE_S = 30.0  # a preempted job has stopped this long after the cycle that chose it
MIG_LAYOUTS = (  # ``--mig``: the layouts of the GPUs in MIG mode, in turn (A100/H100 80GB)
    ("1g.10gb",) * 7,
    ("3g.40gb", "3g.40gb"),
    ("4g.40gb", "2g.20gb", "1g.10gb"),
    ("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"),
)
MIG_PROFILES = (("1g.10gb", 0.45), ("2g.20gb", 0.25), ("3g.40gb", 0.15), ("4g.40gb", 0.15))


# -- the emulated cluster --------------------------------------------------------------


@dataclass(slots=True)
class Gpu:
    uuid: str
    index: int
    name: str
    used: int = 0
    exclusive: bool = False
    shares: int = 0
    healthy: bool = True

    def view(self) -> GpuView:
        return GpuView(
            self.uuid, self.index, self.name, GPU_MEMORY, self.used, self.exclusive, self.shares,
            self.healthy,
        )  # fmt: skip


@dataclass(slots=True)
class Mig:
    """A MIG device of a GPU in MIG mode (``--mig``)."""

    uuid: str
    parent: str
    profile: str
    held: bool = False

    def view(self) -> MigView:
        return MigView(self.uuid, self.parent, self.profile, 10 * GiB, self.held)


@dataclass(slots=True)
class Node:
    name: str
    gpus: list[Gpu]
    available: bool = True
    cached: NodeView | None = None
    cpus_per_gpu: float = 0.0  # > 0: the node counts 2x this per GPU (``--cpus-per-gpu``)
    migs: list[Mig] = field(default_factory=list)

    def view(self) -> NodeView:
        if self.cached is None:
            reason = None if self.available else "heartbeat lost"
            gpus = tuple(g.view() for g in self.gpus)
            cpus, used = None, 0.0
            if self.cpus_per_gpu:  # every job asks this per GPU: one per exclusive GPU or share
                cpus = 2 * self.cpus_per_gpu * len(self.gpus)
                held = sum(1 if g.exclusive else g.shares for g in self.gpus)
                used = self.cpus_per_gpu * held
            self.cached = NodeView(self.name, gpus, self.available, reason, (), (), cpus, used)
            if self.migs:
                self.cached = replace(self.cached, migs=tuple(m.view() for m in self.migs))
        return self.cached


class Cluster:
    """Node and GPU allocation state, changed by placements and completions."""

    def __init__(
        self,
        nodes: int,
        gpus_per_node: int,
        rnd: random.Random,
        cpus_per_gpu: float = 0.0,
        mig: bool = False,
    ) -> None:
        """``mig``: every GPU of every third node is in MIG mode (a third of the GPUs; the
        other nodes still take 8-GPU jobs), with the ``MIG_LAYOUTS`` in turn (drawn from
        nothing: ``rnd``'s stream is the same)."""
        self.nodes: dict[str, Node] = {}
        self.by_uuid: dict[str, Gpu] = {}
        self.migs: dict[str, tuple[Node, Mig]] = {}
        for i in range(nodes):
            name = f"node-{i:05d}"
            model = MODELS[i % len(MODELS)]
            gpus = [Gpu(f"GPU-{name}-{j}", j, model) for j in range(gpus_per_node)]
            for gpu in gpus:
                gpu.healthy = rnd.random() > 0.002
                self.by_uuid[gpu.uuid] = gpu
            node = self.nodes[name] = Node(name, gpus, rnd.random() > 0.005, None, cpus_per_gpu)
            for gpu in gpus if mig and i % 3 == 1 else ():
                gpu.healthy = False  # in MIG mode: its devices are the units
                layout = MIG_LAYOUTS[(i // 3 + gpu.index) % len(MIG_LAYOUTS)]
                for slot, profile in enumerate(layout):
                    device = Mig(f"MIG-{gpu.uuid}-{slot}", gpu.uuid, profile)
                    node.migs.append(device)
                    self.migs[device.uuid] = (node, device)

    def views(self) -> tuple[NodeView, ...]:
        return tuple(n.view() for n in self.nodes.values())

    def gpu_count(self) -> int:
        return len(self.by_uuid)

    def busy_gpus(self) -> int:
        return sum(1 for g in self.by_uuid.values() if g.exclusive or g.shares)

    def take(self, placement: Placement) -> None:
        if placement.mig is not None:
            self.migs[placement.mig][1].held = True
        for uuid in placement.gpu_uuids:
            gpu = self.by_uuid[uuid]
            if placement.memory_per_gpu is None:
                gpu.exclusive, gpu.used = True, GPU_MEMORY
            else:
                gpu.used += placement.memory_per_gpu
                gpu.shares += 1
        self.nodes[placement.node].cached = None

    def release(self, placement: Placement) -> None:
        if placement.mig is not None:
            self.migs[placement.mig][1].held = False
        for uuid in placement.gpu_uuids:
            gpu = self.by_uuid[uuid]
            if placement.memory_per_gpu is None:
                gpu.exclusive, gpu.used = False, 0
            else:
                gpu.used -= placement.memory_per_gpu
                gpu.shares -= 1
        self.nodes[placement.node].cached = None


def random_job(job_id: int, rnd: random.Random, submitted_at: float) -> JobRequest:
    """One job of the benchmark's mix."""
    draw = rnd.random()
    model = "H100" if draw < 0.05 else "A100" if draw < 0.08 else None
    priority = rnd.choices(*PRIORITIES)[0]
    if rnd.random() < 0.3:
        gpus = 2 if rnd.random() < 0.1 else 1
        share = rnd.choice(SHARES_GIB) * GiB
        return JobRequest(job_id, gpus, submitted_at, share, model, priority)
    gpus = rnd.choices([g for g, _ in WHOLE_GPUS], weights=[w for _, w in WHOLE_GPUS])[0]
    return JobRequest(job_id, gpus, submitted_at, None, model, priority)


def random_mig_job(job_id: int, rnd: random.Random, submitted_at: float) -> JobRequest:
    """One job of the ``--mig`` mix: a fifth ask for a MIG device (``MIG_PROFILES``), a
    fifth for memory shares, the rest whole GPUs, as ``random_job``."""
    draw = rnd.random()
    priority = rnd.choices(*PRIORITIES)[0]
    if draw < 0.2:
        profile = rnd.choices(*zip(*MIG_PROFILES, strict=True))[0]
        return JobRequest(job_id, 0, submitted_at, None, None, priority, mig=profile)
    if draw < 0.4:
        gpus = 2 if rnd.random() < 0.1 else 1
        return JobRequest(job_id, gpus, submitted_at, rnd.choice(SHARES_GIB) * GiB, None, priority)
    gpus = rnd.choices([g for g, _ in WHOLE_GPUS], weights=[w for _, w in WHOLE_GPUS])[0]
    return JobRequest(job_id, gpus, submitted_at, None, None, priority)


def job_maker(args: argparse.Namespace) -> Callable[[int, random.Random, float], JobRequest]:
    """``random_mig_job`` with ``--mig``, else ``random_job``."""
    return random_mig_job if getattr(args, "mig", False) else random_job


def with_cpus(job: JobRequest, cpus_per_gpu: float) -> JobRequest:
    """``--cpus-per-gpu``: the job asks that many CPUs per GPU (none when 0)."""
    return replace(job, cpus=cpus_per_gpu * job.gpus) if cpus_per_gpu and job.gpus else job


def with_limit(job: JobRequest, rnd: random.Random) -> JobRequest:
    """Running-jobs mode: 40% of jobs declare a ``max_runtime`` (drawn from their own ``rnd``)."""
    if rnd.random() < 0.4:
        return replace(job, max_runtime=rnd.choice(MAX_RUNTIMES))
    return job


def duration(rnd: random.Random) -> float:
    """Virtual run time: log-normal, median 10 minutes, clipped to [30 s, 4 h]."""
    return min(max(rnd.lognormvariate(math.log(600), 1.0), 30.0), 14400.0)


def order_key(job: JobRequest) -> tuple[int, float, int]:
    """The server's pending order (``load_snapshot``): priority desc, submitted_at, id."""
    return (-job.priority, job.submitted_at, job.id)


# -- timing -----------------------------------------------------------------------------


class NoopFilter:
    """A filter that declares nothing: it admits every node (``--extra-filter noop``)."""

    name = "noop"
    layer = "devices"

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        return SUCCESS

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        return None


class HalfFilter:
    """A filter that declares nothing and rejects half of the nodes, by a hash of their name,
    as "not now" (``--extra-filter half``)."""

    name = "half"
    layer = "health"

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if zlib.crc32(node.name.encode()) % 2 == 0:
            return SUCCESS
        return Status.unschedulable(self.layer, f"node {node.name} is kept for others")

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        return PendingReason(self.layer, f"{len(rejections)} nodes are kept for others")


class NoopScorer:
    """A scorer that declares nothing: every node scores 0 (``--extra-scorer noop``)."""

    name = "noop_scorer"

    def score(self, job: JobRequest, node: NodeState, state: CycleState) -> float:
        return 0.0


EXTRA_FILTERS: dict[str, Callable[[], FilterPolicy]] = {
    NoopFilter.name: NoopFilter,
    HalfFilter.name: HalfFilter,
}
EXTRA_SCORERS: dict[str, Callable[[], ScorePolicy]] = {"noop": NoopScorer}


def register_extra(args: argparse.Namespace) -> None:
    """Register ``--extra-filter`` and ``--extra-scorer`` as a new policy would be: one registry
    line each."""
    if args.extra_filter is not None:
        filters = cast(dict[str, Callable[[], FilterPolicy]], registry.FILTER_POLICIES)
        filters[args.extra_filter] = EXTRA_FILTERS[args.extra_filter]
    if args.extra_scorer is not None:
        scorers = cast(dict[str, Callable[[], ScorePolicy]], registry.SCORE_POLICIES)
        scorers[NoopScorer.name] = EXTRA_SCORERS[args.extra_scorer]


def config_of(args: argparse.Namespace) -> SchedulerConfig:
    """``--placement``, with ``--no-price-shares`` binpack's ``price_shares`` option off,
    ``--extra-filter`` after the default filters and ``--extra-scorer`` beside the placement
    scorer."""
    extra = getattr(args, "extra_filter", None)
    filters = None if extra is None else [*registry.DEFAULT_FILTERS, extra]
    if args.price_shares:
        scorer = ScorerWeight(name=args.placement)
    else:
        scorer = ScorerWeight(name="binpack", options={"price_shares": False})
    scorers = [scorer]
    if getattr(args, "extra_scorer", None) is not None:
        scorers.append(ScorerWeight(name=NoopScorer.name))
    return SchedulerConfig(policies=PoliciesConfig(filters=filters, scorers=scorers))


def timer_of(args: argparse.Namespace) -> Timer:
    """The ``Timer`` of ``config_of(args)``, with a learning session as the controller's."""
    config = config_of(args)
    return Timer(config)


@dataclass
class Timer:
    """Times ``schedule()`` calls; optionally profiles only them (cProfile)."""

    config: SchedulerConfig
    profiler: Any = None
    seconds: list[float] = field(default_factory=list)  # wall clock
    cpu_seconds: list[float] = field(default_factory=list)  # this process's CPU time
    gc_seconds: float = 0.0  # garbage collector pauses inside schedule()
    gc_outside_seconds: float = 0.0  # pauses between the calls (schedule() pauses the collector)
    session: SchedulerSession = field(  # as the controller's: plugins learn across cycles
        default_factory=lambda: SchedulerSession(learn=True)
    )
    _inside: bool = False
    _gc_start: float = 0.0

    def __post_init__(self) -> None:
        gc.callbacks.append(self._on_gc)
        profile = build_profile(self.config)  # what a plugin needs, before any cycle, as the
        for plugin in profile.pre_scorers:  # controller's start
            plugin.prepare(profile)

    def __call__(self, snapshot: Snapshot) -> Plan:
        if self.profiler is not None:
            self.profiler.enable()
        self._inside = True
        start, start_cpu = time.perf_counter(), time.process_time()
        plan = schedule(snapshot, self.config, session=self.session)
        self.cpu_seconds.append(time.process_time() - start_cpu)
        self.seconds.append(time.perf_counter() - start)
        self._inside = False
        if self.profiler is not None:
            self.profiler.disable()
        return plan

    def reset(self) -> None:
        self.seconds, self.cpu_seconds, self.gc_seconds = [], [], 0.0
        self.gc_outside_seconds = 0.0

    def gc_share(self) -> float:
        """The fraction of the time in schedule() spent in garbage collection."""
        total = sum(self.seconds)
        return round(self.gc_seconds / total, 3) if total else 0.0

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        elif self._inside:
            self.gc_seconds += time.perf_counter() - self._gc_start
        else:
            self.gc_outside_seconds += time.perf_counter() - self._gc_start


# -- drain --------------------------------------------------------------------------------


Live = dict[int, tuple[int, Placement, RunningJob]]  # job id -> (placement number, ...)


def drain(args: argparse.Namespace, timer: Timer) -> dict[str, Any]:
    """Run cycles on a virtual clock until every queued job has been placed (and has stayed)."""
    rnd = random.Random(args.seed)
    limits = random.Random(args.seed + 3)  # max_runtime draws: the job stream stays the same
    cluster = Cluster(args.nodes, args.gpus_per_node, rnd, args.cpus_per_gpu, args.mig)
    make = job_maker(args)
    jobs = [make(i, rnd, i * 0.001) for i in range(1, args.queued + 1)]
    jobs = [with_cpus(job, args.cpus_per_gpu) for job in jobs]
    if args.running:
        jobs = [with_limit(job, limits) for job in jobs]
    by_id = {job.id: job for job in jobs}
    pending = sorted(jobs, key=order_key)
    running: list[tuple[float, int, Placement]] = []  # (end, placement number, placement)
    live: Live = {}  # what holds GPUs now: the snapshot's running jobs
    if args.gc_freeze:
        gc.freeze()
    now, placements, verdicts, cycles, stuck, preempted, number = 0.0, 0, 0, 0, 0, 0, 0
    busy_samples: list[float] = []
    start = time.perf_counter()
    while pending:
        held = tuple(r for _, _, r in live.values()) if args.running else ()
        plan = timer(Snapshot(now, cluster.views(), tuple(pending[: args.per_cycle]), held))
        cycles += 1
        placements += len(plan.placements)
        verdicts += len(plan.pending)
        for p in plan.placements:
            cluster.take(p)
            job, number = by_id[p.job_id], number + 1
            end = now + duration(rnd)
            if job.max_runtime is not None:
                end = min(end, now + job.max_runtime)  # stopped at its max_runtime
            heapq.heappush(running, (end, number, p))
            live[p.job_id] = (number, p, started(job, p, now))
        if plan.placements:
            placed = {p.job_id for p in plan.placements}
            pending = [j for j in pending if j.id not in placed]
        for preemption in plan.preemptions:  # the victim stops within the grace period
            number_v, p, victim = live[preemption.victim_id]
            stopping = replace(victim, stopping=True, preempted_for=preemption.preemptor_id)
            live[victim.id] = (number_v, p, stopping)
            heapq.heappush(running, (now + GRACE_S, number_v, p))
            preempted += 1
        busy_samples.append(cluster.busy_gpus() / cluster.gpu_count())
        drop_ended(running, live)
        if not running:
            stuck = len(pending)  # nothing runs and nothing fits: would wait forever
            break
        now += args.tick
        if not plan.placements and running[0][0] > now:
            now = running[0][0]  # nothing changes before the next completion
        while running and running[0][0] <= now:
            _, n, p = heapq.heappop(running)
            entry = live.get(p.job_id)
            if entry is None or entry[0] != n:
                continue  # a preempted job's original end: it stopped already
            cluster.release(p)
            del live[p.job_id]
            if entry[2].preempted_for is not None:  # back to the queue, keeping its submit time
                bisect.insort(pending, by_id[p.job_id], key=order_key)
    schedule_s, cpu_s = sum(timer.seconds), sum(timer.cpu_seconds)
    decisions = placements + verdicts
    return {
        "cycles": cycles,
        "placements": placements,
        "pending_verdicts": verdicts,
        "preemptions": preempted,
        "decisions": decisions,
        "schedule_s": round(schedule_s, 3),
        "decisions_per_s": round(decisions / schedule_s) if schedule_s else None,
        "decisions_per_cpu_s": round(decisions / cpu_s) if cpu_s else None,
        "drain_wall_s": round(time.perf_counter() - start, 3),
        "drain_cycle_mean_ms": round(1000 * schedule_s / max(cycles, 1), 2),
        "drain_cycle_max_ms": round(1000 * max(timer.seconds, default=0.0), 2),
        "drain_gc_share": timer.gc_share(),
        "virtual_s": round(now),
        "mean_gpu_busy": round(statistics.fmean(busy_samples), 3) if busy_samples else 0.0,
        "never_placed": stuck,
    }


def started(job: JobRequest, p: Placement, now: float) -> RunningJob:
    """The running job a placement becomes (it starts at once)."""
    return RunningJob(
        job.id, job.queue, job.priority, p.node, p.gpu_uuids, p.memory_per_gpu, now,
        job.submitted_at, job.max_runtime, cpus=job.cpus, mig=p.mig,
    )  # fmt: skip


def drop_ended(running: list[tuple[float, int, Placement]], live: Live) -> None:
    """Pop heap heads that no longer stand for a running job (preempted, stopped already)."""
    while running:
        entry = live.get(running[0][2].job_id)
        if entry is not None and entry[0] == running[0][1]:
            return
        heapq.heappop(running)


# -- latency at 1000 queued jobs --------------------------------------------------------


def fill(cluster: Cluster, occupancy: float, rnd: random.Random) -> None:
    """Make ``occupancy`` of the GPUs busy: 70% held whole, 30% holding 1-3 shares."""
    for gpu in cluster.by_uuid.values():
        if rnd.random() >= occupancy:
            continue
        if rnd.random() < 0.7:
            gpu.exclusive, gpu.used = True, GPU_MEMORY
        else:
            gpu.shares = rnd.randint(1, 3)
            gpu.used = min(sum(rnd.choice(SHARES_GIB) for _ in range(gpu.shares)), 80) * GiB
    for node in cluster.nodes.values():
        node.cached = None


def holders(cluster: Cluster, now: float, rnd: random.Random, first_id: int) -> list[RunningJob]:
    """Running jobs holding exactly what ``fill`` made busy (drawn from their own ``rnd``).

    Each node's exclusive GPUs go to whole-GPU jobs of 1, 2, 4 or 8 GPUs;
    each share of a shared GPU is one shared job.
    """
    out: list[RunningJob] = []
    for node in cluster.nodes.values():
        exclusive = [g.uuid for g in node.gpus if g.exclusive]
        while exclusive:
            size = rnd.choice([n for n, _ in WHOLE_GPUS if n <= len(exclusive)])
            out.append(
                running_job(first_id + len(out), node.name, exclusive[:size], None, now, rnd)
            )
            exclusive = exclusive[size:]
        for gpu in node.gpus:
            for k in range(0 if gpu.exclusive else gpu.shares):
                share = gpu.used // gpu.shares
                if k == 0:
                    share += gpu.used - share * gpu.shares  # the shares add up to ``used``
                out.append(running_job(first_id + len(out), node.name, [gpu.uuid], share, now, rnd))
    return out


def running_job(
    job_id: int, node: str, uuids: list[str], share: int | None, now: float, rnd: random.Random
) -> RunningJob:
    """Started up to 4h ago; 40% with a max_runtime it has not reached, 10% with a
    min_runtime, 3% not preemptible, 1% already stopping."""
    ran = rnd.uniform(60.0, 14400.0)
    limits = [m for m in MAX_RUNTIMES if m > ran]
    max_runtime = rnd.choice(limits) if rnd.random() < 0.4 else None
    return RunningJob(
        id=job_id,
        queue="default",
        priority=rnd.choices(*PRIORITIES)[0],
        node=node,
        gpu_uuids=tuple(uuids),
        memory_per_gpu=share,
        started_at=now - ran,
        submitted_at=now - ran - rnd.uniform(0.0, 600.0),
        max_runtime=max_runtime,
        min_runtime=600.0 if rnd.random() < 0.1 else None,
        preemptible=rnd.random() >= 0.03,
        stopping=rnd.random() < 0.01,
    )


def latency(args: argparse.Namespace, timer: Timer) -> tuple[dict[str, Any], list[float]]:
    """Cycles with exactly 1000 queued jobs at each occupancy: the figures (p50/p99 over all
    of them) and each cycle's milliseconds, in order."""
    rnd = random.Random(args.seed + 1)
    extra = random.Random(args.seed + 2)  # running jobs and max_runtimes: rnd's stream stays
    per_level = max(1, args.latency_cycles // len(OCCUPANCIES))
    all_ms: list[float] = []
    reference: list[float] = []
    by_level: dict[str, float] = {}
    now = 0.0
    for label, occupancy in OCCUPANCIES:
        cluster = Cluster(args.nodes, args.gpus_per_node, rnd, args.cpus_per_gpu, args.mig)
        fill(cluster, occupancy, rnd)
        nodes = cluster.views()
        running: tuple[RunningJob, ...] = ()
        if args.running:
            running = tuple(
                replace(r, cpus=args.cpus_per_gpu * len(r.gpu_uuids) or None)
                for r in holders(cluster, now, extra, 10**9)
            )
        if args.gc_freeze:
            gc.freeze()
        before = len(timer.seconds)
        for c in range(per_level):
            jobs = tuple(
                with_cpus(job_maker(args)(c * 10_000 + i, rnd, float(i)), args.cpus_per_gpu)
                for i in range(LATENCY_QUEUE)
            )
            if args.running:
                jobs = tuple(with_limit(job, extra) for job in jobs)
            timer(Snapshot(now, nodes, jobs, running))
            reference.append(reference_ms())
        level_ms = [1000 * s for s in timer.seconds[before:]]
        by_level[f"cycle_p50_ms_{label}"] = round(statistics.median(level_ms), 2)
        all_ms += level_ms
    cpu_ms = [1000 * s for s in timer.cpu_seconds]
    figures: dict[str, Any] = {
        "latency_cycles": len(all_ms),
        "cycle_p50_ms": round(percentile(all_ms, 50), 2),
        "cycle_p99_ms": round(percentile(all_ms, 99), 2),
        "cycle_max_ms": round(max(all_ms), 2),
        "cycle_cpu_p50_ms": round(percentile(cpu_ms, 50), 2),
        "cycle_cpu_p99_ms": round(percentile(cpu_ms, 99), 2),
        "cycle_gc_share": timer.gc_share(),
        "gc_between_cycles_ms": round(1000 * timer.gc_outside_seconds, 1),
        "reference_p50_ms": round(percentile(reference, 50), 2),
        "reference_p99_ms": round(percentile(reference, 99), 2),
        "reference_p99_over_p50": round(percentile(reference, 99) / percentile(reference, 50), 2),
        **by_level,
    }
    return figures, all_ms


def best_of_runs(args: argparse.Namespace, argv: list[str], first: list[float]) -> dict[str, Any]:
    """``--repeats``: each cycle's fastest time over the first run and ``repeats - 1`` more,
    each run in a fresh process with the same arguments ``argv``."""
    runs = [first]
    again = [a for a in argv if a != "--profile"]
    command = [sys.executable, __file__, *again, "--skip-drain", "--repeats=1", "--cycle-times"]
    for _ in range(args.repeats - 1):
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out)["cycle_ms"])
    best = [min(times) for times in zip(*runs, strict=True)]
    return {
        "latency_repeats": len(runs),
        "cycle_p50_ms_best_of_runs": round(percentile(best, 50), 2),
        "cycle_p99_ms_best_of_runs": round(percentile(best, 99), 2),
        "cycle_max_ms_best_of_runs": round(max(best), 2),
    }


REFERENCE_ROWS = tuple((i * 7919 % 1009, f"node-{i}") for i in range(1500))
REFERENCE_ROUNDS = 20  # about 10 ms: the same order as a cycle


def reference_ms() -> float:
    """Time one fixed pure-Python workload (sorting, dicts, tuples; no scheduler code), in ms.

    The same work every call, so the spread of its times is the machine's
    noise, not the benchmark's.
    """
    start = time.perf_counter()
    total = 0
    for _ in range(REFERENCE_ROUNDS):
        rows = sorted(REFERENCE_ROWS)
        table = {name: key for key, name in rows}
        for key, name in REFERENCE_ROWS:
            total += table[name] - key
            total += len(rows[key][1])
    if total < 0:  # never: keeps the loop's result used
        raise AssertionError(total)
    return 1000 * (time.perf_counter() - start)


def without_and_with(args: argparse.Namespace, which: str) -> dict[str, Any]:
    """The drain's decisions/s (wall and CPU) without either extra, then with the ``which``
    one alone (``extra_filter`` or ``extra_scorer``), and the ratios."""
    plain = argparse.Namespace(**{**vars(args), "extra_filter": None, "extra_scorer": None})
    without = drain(plain, timer_of(plain))
    alone = argparse.Namespace(**{**vars(plain), which: getattr(args, which)})
    extra = drain(alone, timer_of(alone))
    keys = ("decisions_per_s", "decisions_per_cpu_s", "schedule_s")
    return {
        "name": getattr(args, which),
        "without": {k: without[k] for k in keys},
        "with": {k: extra[k] for k in keys},
        "ratio": round(extra["decisions_per_s"] / without["decisions_per_s"], 3),
        "cpu_ratio": round(extra["decisions_per_cpu_s"] / without["decisions_per_cpu_s"], 3),
    }


def mig_ratio(args: argparse.Namespace) -> dict[str, Any]:
    """``--mig``: the drain's decisions/s without MIG (the default mix), then with, in this
    run, and the ratio (the goal: at least 0.7)."""
    plain = argparse.Namespace(**{**vars(args), "mig": False})
    without = drain(plain, timer_of(plain))
    with_mig = drain(args, timer_of(args))
    keys = ("decisions_per_s", "decisions_per_cpu_s", "schedule_s", "never_placed")
    return {
        "without": {k: without[k] for k in keys},
        "with": {k: with_mig[k] for k in keys},
        "ratio": round(with_mig["decisions_per_s"] / without["decisions_per_s"], 3),
        "cpu_ratio": round(with_mig["decisions_per_cpu_s"] / without["decisions_per_cpu_s"], 3),
    }


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


# -- profile and main ---------------------------------------------------------------------


@contextlib.contextmanager
def profiling(enabled: bool, timer: Timer) -> Iterator[None]:
    """pyinstrument over the whole run when installed, else cProfile of schedule() only."""
    if not enabled:
        yield
        return
    try:
        from pyinstrument import Profiler  # type: ignore[import-not-found]
    except ImportError:
        import cProfile
        import pstats

        timer.profiler = cProfile.Profile()
        yield
        stats = pstats.Stats(timer.profiler, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(25)
        return
    profiler = Profiler()
    profiler.start()
    yield
    profiler.stop()
    print(profiler.output_text(unicode=False, color=False), file=sys.stderr)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add: Callable[..., Any] = parser.add_argument
    add("--nodes", type=int, default=1000)
    add("--gpus-per-node", type=int, default=8)
    add("--queued", type=int, default=100_000)
    add("--per-cycle", type=int, default=5000, help="pending jobs per cycle (server: 5000)")
    add("--tick", type=float, default=300.0, help="virtual seconds between cycles")
    add("--latency-cycles", type=int, default=300, help="cycles of 1000 queued jobs")
    add("--placement", choices=("binpack", "spread"), default="binpack")
    add(
        "--no-price-shares",
        dest="price_shares",
        action="store_false",
        help="binpack without its share prices (policies/share_price/; on by default)",
    )
    add("--seed", type=int, default=1)
    add(
        "--extra-filter",
        choices=tuple(EXTRA_FILTERS),
        default=None,
        help="also drain with this filter, which declares nothing; report the ratio",
    )
    add(
        "--extra-scorer",
        choices=tuple(EXTRA_SCORERS),
        default=None,
        help="also drain with this scorer, which declares nothing; report the ratio",
    )
    add("--skip-drain", action="store_true", help="only the 1000-job latency cycles")
    add(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() the benchmark's own data before measuring, as a server may after start",
    )
    add(
        "--no-running",
        dest="running",
        action="store_false",
        help="snapshots without running jobs (busy GPUs held by nobody), as first measured",
    )
    add(
        "--cpus-per-gpu",
        type=float,
        default=0.0,
        help="nodes count CPUs (2x this per GPU) and every job asks this per GPU (0: no CPUs)",
    )
    add(
        "--repeats",
        type=int,
        default=3,
        help="runs of the latency cycles (later ones in fresh processes): *_best_of_runs figures",
    )
    add(
        "--mig",
        action="store_true",
        help="a third of the GPUs in MIG mode (mixed layouts), a fifth of the jobs asking for "
        "a MIG device and a fifth for shares; the drain also runs without, for mig_ratio",
    )
    add("--cycle-times", action="store_true", help=argparse.SUPPRESS)  # JSON of every cycle's ms
    add("--json", action="store_true", help="print one JSON object")
    add("--profile", action="store_true", help="print the hottest functions to stderr")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    register_extra(args)
    if args.cycle_times:  # a later run of ``--repeats``
        _, cycle_ms = latency(args, timer_of(args))
        print(json.dumps({"cycle_ms": cycle_ms}))
        return
    params = {k: v for k, v in vars(args).items() if k not in ("json", "profile", "cycle_times")}
    timer = timer_of(args)
    result: dict[str, Any] = {
        "params": params,
        "python": sys.version.split()[0],
        **build_info(),
    }
    for which in ("extra_filter", "extra_scorer"):
        if getattr(args, which) is not None and not args.skip_drain:
            result[which] = without_and_with(args, which)
    if args.mig and not args.skip_drain:
        result["mig_ratio"] = mig_ratio(args)
    with profiling(args.profile, timer):
        if not args.skip_drain:
            result.update(drain(args, timer))
        timer.reset()
        figures, cycle_ms = latency(args, timer)
        result.update(figures)
    if args.repeats > 1:
        result.update(best_of_runs(args, argv, cycle_ms))
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:>24}: {value}")


if __name__ == "__main__":
    main()
