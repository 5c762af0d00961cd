"""A fixed, seeded set of scheduling scenarios and a canonical digest of their Plans.

``test_plan_parity.py`` replays them and compares the digests with the
golden file ``plan_parity.json``, written from the code before a refactor
that must not change any Plan. Each case is built from a seed with the
builders, so the set is the same on every machine and Python version
(``random.Random`` is stable across versions for ``random``, ``randint``
and ``choice``).

The cases cover whole GPUs, shares, gangs, CPUs, selectors and taints,
NVLink topology, unhealthy and unavailable nodes, queues with guarantees,
limits, borrowing and reclaim, backfill (``max_runtime``), priority
preemption and stopping victims, the default profile with share prices on
and off, spread, the generic (non-indexed) path, strict FIFO, sequences of
cycles that keep node views (the reuse paths), and a few short simulator
runs.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from gpudock.config import SchedulerConfig
from gpudock.core.job import PendingReason
from gpudock.queue import QueuesConfig
from gpudock.scheduler.admission import QueuePolicy
from gpudock.scheduler.cycle import run_cycle, schedule
from gpudock.scheduler.framework import Profile
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import JobRequest, NodeView, Plan, RunningJob, Snapshot
from gpudock.sim.cluster import parse_cluster
from gpudock.sim.engine import SimConfig, simulate
from gpudock.sim.policies import POLICIES
from gpudock.sim.traces import TraceJob

from .builders import make_job, make_node, make_running, make_snapshot

QUEUES = ("a", "b", "c")
MODELS = (("A100-80GB", "80GiB"), ("H100", "80GiB"), ("V100-32GB", "32GiB"))

Scheduler = Callable[[Snapshot], Plan]


def plan_data(plan: Plan) -> dict[str, Any]:
    """The Plan as canonical JSON data: everything a caller reads, in a fixed order."""

    def reason(r: PendingReason) -> list[str | None]:
        return [r.layer, r.message, r.counterfactual]

    return {
        "placements": [
            [p.job_id, p.node, list(p.gpu_uuids), p.memory_per_gpu] for p in plan.placements
        ],
        "gangs": [
            [g.job_id, [[p.node, list(p.gpu_uuids), p.memory_per_gpu] for p in g.parts]]
            for g in plan.gangs
        ],
        "preemptions": [[p.victim_id, p.preemptor_id, p.reason] for p in plan.preemptions],
        "pending": [[job, [reason(r) for r in rs]] for job, rs in sorted(plan.pending.items())],
    }


def digest(data: object) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def configs() -> dict[str, SchedulerConfig]:
    """The configurations every random snapshot is scheduled under."""
    unpriced = {"scorers": [{"name": "binpack", "options": {"price_shares": False}}]}
    queues = QueuesConfig.model_validate(
        {
            "queues": [
                {"name": "a", "weight": 2, "guarantee": {"gpus": 8}, "limit": {"gpus": 16}},
                {"name": "b", "guarantee": {"gpus": 4}, "borrow": True},
                {"name": "c", "guarantee": {"gpus": 2}, "limit": {"gpus": 6}, "borrow": False},
            ]
        }
    )
    return {
        "default": SchedulerConfig(),
        "unpriced": SchedulerConfig.model_validate({"policies": unpriced}),
        "spread": SchedulerConfig(placement="spread"),
        "queues": SchedulerConfig(queues=queues),
    }


def random_nodes(rng: random.Random, count: int) -> list[NodeView]:
    nodes = []
    for i in range(count):
        model, memory = rng.choice(MODELS)
        node = make_node(f"n{i:03d}").gpus(rng.choice((0, 2, 4, 8, 8, 8)), model, memory)
        size = len(node.build().gpus)
        if rng.random() < 0.2:
            node.label("zone", rng.choice(("eu", "us")))
        if rng.random() < 0.1:
            node.taint("dedicated=ml:NoSchedule")
        if rng.random() < 0.3:
            node.cpus(rng.choice((32, 64, 96)), used=rng.choice((0, 8, 16)))
        if size == 8 and rng.random() < 0.3:
            node.topology(nvlink=[[0, 1, 2, 3], [4, 5, 6, 7]], numa=[[0, 1, 2, 3]])
        if size and rng.random() < 0.08:
            node.unhealthy(rng.randrange(size))
        if rng.random() < 0.04:
            node.unavailable("drained")
        nodes.append(node.build())
    return nodes


def random_running(rng: random.Random, nodes: list[NodeView], now: float) -> list[RunningJob]:
    running: list[RunningJob] = []
    next_id = 10_000
    for node in nodes:
        free = [g.index for g in node.gpus]
        rng.shuffle(free)
        while free and rng.random() < 0.6:
            job = make_running(next_id).queue(rng.choice(QUEUES)).priority(rng.randint(0, 4))
            job.started(now - rng.randint(1, 5000))
            if rng.random() < 0.3:
                job.share(rng.choice(("10GiB", "20GiB")))
                job.on(node.name, free.pop())
            else:
                take = min(len(free), rng.choice((1, 1, 2, 4)))
                job.on(node.name, *[free.pop() for _ in range(take)])
            if rng.random() < 0.5:
                job.max_runtime(rng.choice((3600, 7200, 20000)))
            if rng.random() < 0.1:
                job.not_preemptible()
            if rng.random() < 0.1:
                job.min_runtime(600)
            running.append(job.build())
            next_id += 1
    if running and rng.random() < 0.3:  # a victim still stopping for a pending job
        victim = rng.choice(running)
        stopping = replace(victim, stopping=True, preempted_for=1)
        running = [stopping if r is victim else r for r in running]
    return running


def random_job(rng: random.Random, job_id: int, now: float) -> JobRequest:
    job = make_job(job_id).queue(rng.choice(QUEUES)).priority(rng.randint(0, 6))
    job.submitted(now - rng.randint(0, 9000))
    kind = rng.random()
    if kind < 0.3:
        job.gpus(1).gpu_memory(rng.choice(("5GiB", "10GiB", "20GiB", "40GiB")))
    elif kind < 0.38:
        job.gpus(rng.choice((2, 4, 8))).nodes(rng.choice((2, 3)))
    elif kind < 0.41:
        job.gpus(0).cpus(4)
    else:
        job.gpus(rng.choice((1, 1, 1, 2, 2, 4, 8)))
    if rng.random() < 0.35:
        job.max_runtime(rng.choice((300, 1800, 3600, 36000)))
    if rng.random() < 0.15:
        job.model(rng.choice(MODELS)[0])
    if rng.random() < 0.1:
        job.selector("zone", rng.choice(("eu", "us")))
    if rng.random() < 0.1:
        job.tolerate("dedicated")
    if rng.random() < 0.15:
        job.cpus(rng.choice((2, 8, 16)))
    if rng.random() < 0.1:
        job.topology("nvlink")
    if rng.random() < 0.15:
        job.cannot_preempt()
    return job.build()


def random_snapshot(seed: int) -> Snapshot:
    rng = random.Random(seed)
    now = 100_000.0
    nodes = random_nodes(rng, rng.randint(3, 24))
    running = random_running(rng, nodes, now)
    jobs = [random_job(rng, i, now) for i in range(1, rng.randint(4, 60))]
    return make_snapshot(nodes, jobs, now=now, running=running)


def sequence(seed: int, cycles: int) -> Iterator[Snapshot]:
    """Cycles on one cluster that keep every unchanged node view and running tuple, as the
    simulator and the controller do: each cycle starts some of the last Plan's placements."""
    snapshot = random_snapshot(seed)
    rng = random.Random(seed + 1)
    for cycle in range(cycles):
        yield snapshot
        plan = schedule(snapshot, SchedulerConfig())
        started = {p.job_id: p for p in plan.placements[: rng.randint(0, 3)]}
        if not started and cycle % 2:
            continue  # the very same snapshot again
        nodes = {n.name: n for n in snapshot.nodes}
        running = list(snapshot.running)
        for job in snapshot.pending:
            p = started.get(job.id)
            if p is None:
                continue
            held = RunningJob(
                id=job.id,
                queue=job.queue,
                priority=job.priority,
                node=p.node,
                gpu_uuids=p.gpu_uuids,
                memory_per_gpu=p.memory_per_gpu,
                started_at=snapshot.now,
            )
            running.append(held)
            node = nodes[p.node]
            gpus = tuple(
                g.with_job(p.memory_per_gpu) if g.uuid in p.gpu_uuids else g for g in node.gpus
            )
            nodes[p.node] = replace(node, gpus=gpus)
        pending = tuple(j for j in snapshot.pending if j.id not in started)
        snapshot = replace(
            snapshot,
            now=snapshot.now + 60,
            nodes=tuple(nodes.values()),
            pending=pending,
            running=tuple(running) if started else snapshot.running,
        )


def large_snapshot(seed: int, nodes: int = 200, queued: int = 1000) -> Snapshot:
    """A cluster big enough for the index's buckets and the priced structures to matter."""
    rng = random.Random(seed)
    views = [make_node(f"g{i:04d}").gpus(8).build() for i in range(nodes)]
    running = random_running(rng, views, 100_000.0)
    jobs = [random_job(rng, i, 100_000.0) for i in range(1, queued + 1)]
    return make_snapshot(views, jobs, now=100_000.0, running=running)


def trace(seed: int, count: int) -> list[TraceJob]:
    rng = random.Random(seed)
    jobs = []
    at = 0.0
    for i in range(count):
        at += rng.expovariate(1 / 40)
        fraction = rng.choice((None, None, None, 0.25, 0.5))
        jobs.append(
            TraceJob(
                job_id=f"t{i}",
                submit_time=round(at, 1),
                duration=float(rng.randint(30, 4000)),
                num_gpus=1 if fraction else rng.choice((1, 1, 2, 4, 8)),
                gpu_fraction=fraction,
                queue=rng.choice(QUEUES),
                nodes=1 if fraction else rng.choice((1, 1, 1, 1, 2)),
                max_runtime=None,
            )
        )
    return jobs


def cases() -> Iterator[tuple[str, Callable[[], object]]]:
    """``(name, run)``: each ``run()`` returns the case's canonical data (JSON-able)."""
    every = configs()
    for seed in range(30):
        snapshot = random_snapshot(seed)
        for name, config in every.items():
            yield f"random-{seed}-{name}", _once(snapshot, config)
    profile = build_profile(SchedulerConfig())
    queues = QueuePolicy.from_config(every["queues"].queues, None)
    for seed in range(8):
        snapshot = random_snapshot(100 + seed)
        yield f"generic-{seed}", lambda s=snapshot: plan_data(run_cycle(s, profile, index=False))
        yield f"strict-{seed}", _strict(snapshot, profile, queues)
    for seed in range(6):
        for name in ("default", "queues"):
            yield f"sequence-{seed}-{name}", _sequence(200 + seed, every[name])
    for seed in range(2):
        for name in ("default", "unpriced", "spread"):
            yield f"large-{seed}-{name}", _once(large_snapshot(300 + seed), every[name])
    for policy in ("fifo", "fair-share", "default"):
        yield f"sim-{policy}", _simulated(policy)


def _once(snapshot: Snapshot, config: SchedulerConfig) -> Callable[[], object]:
    return lambda: plan_data(schedule(snapshot, config))


def _strict(
    snapshot: Snapshot, profile: Profile, queues: QueuePolicy | None
) -> Callable[[], object]:
    strict = ("borrow-last", "strict-fifo")
    return lambda: plan_data(run_cycle(snapshot, profile, queues=queues, queueing=strict))


def _sequence(seed: int, config: SchedulerConfig) -> Callable[[], object]:
    return lambda: [plan_data(schedule(s, config)) for s in sequence(seed, 6)]


def _simulated(policy: str) -> Callable[[], object]:
    def run() -> object:
        cluster = parse_cluster("3x8:A100-80GB:80GiB+2x4:V100-32GB:32GiB")
        record = simulate(trace(7, 60), cluster, POLICIES[policy], SimConfig(cycle_interval=30))
        # float(): a compiled engine stores times as floats, the source as given (int or float)
        return [[j.job_id, float(j.start), float(j.end), j.preemptions] for j in record.jobs]

    return run
