"""Internals of the simulator's engine that its speed depends on."""

from __future__ import annotations

import gc
import math
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import pytest

from gpudock.core.affinity import Taint, Toleration
from gpudock.scheduler.snapshot import JobRequest, Placement, RunningJob
from gpudock.sim.cluster import parse_cluster
from gpudock.sim.engine import (
    GC_YOUNG,
    SimConfig,
    Simulator,
    _Job,
    _running_view,
    _with_gpus,
    _with_priority,
)
from gpudock.sim.policies import POLICIES
from gpudock.sim.results import RunRecord
from gpudock.sim.traces import TraceJob


def test_the_fast_priority_copy_equals_dataclasses_replace_on_every_field() -> None:
    request = JobRequest(
        id=7,
        gpus=2,
        submitted_at=3.5,
        gpu_memory=10,
        gpu_model="H100",
        priority=4,
        queue="vision",
        user="ana",
        nodes=2,
        cpus=8.0,
        max_runtime=60.0,
        can_preempt=False,
        node_selector=(("zone", "a"),),
        tolerations=(Toleration(key="gpu"),),
        topology="nvlink",
    )
    assert _with_priority(request, -9) == replace(request, priority=-9)
    assert _with_priority(request, -9, 120.0) == replace(request, priority=-9, remaining=120.0)


class _CountingRanks(Simulator):
    """Counts how often each job's remaining time is computed."""

    calls: Counter[str]

    def _remaining(self, job: _Job, ran: float, version: int) -> float:
        self.calls[job.trace.job_id] += 1
        return super()._remaining(job, ran, version)


def test_a_pending_job_is_ranked_again_only_when_its_rank_may_have_moved() -> None:
    """srtf-oracle, one 8-GPU node: a (1000 s) runs from 0; b (5000 s, arrives at 10)
    waits until 1000. Cycles run at a's 30 s refresh ticks meanwhile, and a is re-ranked
    at them, but b's true remaining time stands still while it waits: it is computed
    once, on arrival."""
    jobs = [TraceJob("a", 0, 1000, 8), TraceJob("b", 10, 5000, 8)]
    simulator = _CountingRanks(jobs, parse_cluster("1x8"), POLICIES["srtf-oracle"])
    simulator.calls = Counter()
    record = simulator.run()
    assert [(j.job_id, j.start, j.end) for j in record.jobs] == [
        ("a", 0, 1000),
        ("b", 1000, 6000),
    ]
    assert record.cycles > 20  # a's refresh ticks
    assert simulator.calls["a"] > 20
    assert simulator.calls["b"] == 1


class _NoKeptRanks(Simulator):
    """Reads the estimator for every rank, as before ranks were kept."""

    def _remaining(self, job: _Job, ran: float, version: int) -> float:
        job.rank_version = -1
        return super()._remaining(job, ran, version)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_ranks_change_no_decision(seed: int) -> None:
    """A rank kept while the attained time stays in its range and the estimator learns
    nothing is the estimator's own: a run without keeping any is the same run.
    Mixed 1-8 GPU jobs, short and long, in two queues with enough finishes to learn."""
    rng = random.Random(seed)
    jobs, now = [], 0.0
    for i in range(150):
        now += rng.expovariate(1 / 100)
        duration = rng.uniform(3000, 60000) if rng.random() < 0.3 else rng.uniform(5, 600)
        gpus = rng.choice([1, 2, 4, 8])
        jobs.append(TraceJob(f"j{i}", round(now, 1), round(duration, 1), gpus, queue=f"q{i % 2}"))
    cluster = parse_cluster("2x8")
    kept = Simulator(jobs, cluster, POLICIES["default"]).run()
    fresh = _NoKeptRanks(jobs, cluster, POLICIES["default"]).run()
    assert kept.preemptions > 0
    assert [(j.start, j.end, j.preemptions) for j in kept.jobs] == [
        (j.start, j.end, j.preemptions) for j in fresh.jobs
    ]


class _Uncached(Simulator):
    """The engine without its shortcuts: every rank read again from the estimator, every
    priority computed from its remaining time and copied into the job's request at once,
    the next refresh found by scanning every running job, and every GPU view made anew
    with ``GpuView.with_job`` and every node view with ``dataclasses.replace``."""

    def _remaining(self, job: _Job, ran: float, version: int) -> float:
        if self.policy.priority == "srtf":
            return super()._remaining(job, ran, version)
        job.rank_version = version
        return self._estimator.remaining(job.trace.queue, job.gpus, ran, job.sibling)

    def _set_priority(self, job: _Job, now: float, remaining: float) -> None:
        job.ranked_as = math.nan
        super()._set_priority(job, now, remaining)
        job.request = replace(job.request, priority=job.priority)

    def _schedule_tick(self, now: float, running: dict[int, _Job]) -> None:
        self._due = None
        super()._schedule_tick(now, running)

    def _reprioritize(self, now: float, pending: dict[int, _Job], running: dict[int, _Job]) -> None:
        """Pending jobs as the engine refreshes them; running jobs through ``_set_priority``
        (the engine inlines it); then every sweep's hold recomputed from scratch, for every
        active job."""
        super()._reprioritize(now, pending, {})
        for job in running.values():
            if job.state == "running" and now >= job.reprioritize_at:
                ran = job.attained(now)
                remaining = self._remaining(job, ran, self._version(job))
                self._set_priority(job, now, remaining + job.owed_at(now))
                job.estimated_end = now + remaining + job.owed_at(now)
        self._due = None  # the next refresh searched for (``_schedule_tick``)
        if not self.policy.siblings:
            return
        shown: dict[int, int] = {}
        for job in self._jobs:  # submission order (the traces here are sorted)
            if job.state not in ("pending", "running", "stopping"):
                continue
            priority = job.priority
            if job.before and job.before in shown:
                priority = min(priority, shown[job.before])
            shown[job.request.id] = priority
            job.request = replace(job.request, priority=priority)
            job.shown = priority
            job.running_views = ()

    def _hold_sweeps(self) -> None:
        pass  # done above

    def _unhold(self, done: _Job) -> None:
        pass  # done above

    def _change(self, part: Placement, request: JobRequest, sign: int) -> None:
        gpus = self._gpus[part.node]
        for uuid in part.gpu_uuids:
            _, index = self._uuid_index[uuid]
            gpus[index] = gpus[index].with_job(part.memory_per_gpu, sign)
        view = self._nodes[part.node]
        used = view.used_cpus + sign * (request.cpus or 0.0) if view.cpus is not None else 0.0
        self._nodes[part.node] = replace(view, gpus=tuple(gpus), used_cpus=max(0.0, used))


def _mixed_jobs(seed: int, count: int = 120) -> list[TraceJob]:
    """Short and long jobs of 1-16 GPUs (16: a gang of two 8-GPU nodes), some sharing a
    GPU, in two queues, arriving about every 100 s."""
    rng = random.Random(seed)
    jobs, now = [], 0.0
    for i in range(count):
        now += rng.expovariate(1 / 100)
        duration = rng.uniform(3000, 20000) if rng.random() < 0.3 else rng.uniform(5, 600)
        gpus = rng.choice([1, 1, 2, 4, 8, 16])
        fraction = 0.5 if gpus == 1 and rng.random() < 0.3 else None
        jobs.append(
            TraceJob(
                f"j{i}",
                round(now, 1),
                round(duration, 1),
                gpus,
                queue=f"q{i % 2}",
                gpu_fraction=fraction,
            )
        )
    return jobs


def _bursty_jobs(seed: int, count: int = 150) -> list[TraceJob]:
    """Bursts of 1-6 jobs of one class (queue and GPU count) submitted 0-40 s apart, with
    run times alike within a burst; bursts about every 300 s."""
    rng = random.Random(seed)
    jobs: list[TraceJob] = []
    now = 0.0
    while len(jobs) < count:
        now += rng.expovariate(1 / 300)
        gpus, queue = rng.choice([1, 2, 4, 8]), rng.choice(["q0", "q1"])
        base = rng.uniform(3000, 20000) if rng.random() < 0.3 else rng.uniform(5, 600)
        at = now
        for _ in range(rng.randint(1, 6)):
            duration = round(base * rng.uniform(0.5, 2), 1)
            jobs.append(TraceJob(f"j{len(jobs)}", round(at, 1), duration, gpus, queue=queue))
            at += rng.choice([0.0, rng.uniform(0, 40)])
        now = at
    return jobs


@pytest.mark.parametrize(
    ("policy", "workload"),
    [
        ("default", _mixed_jobs),
        ("default", _bursty_jobs),
        ("srtf-oracle", _mixed_jobs),
        ("priority", _mixed_jobs),
    ],
)
@pytest.mark.parametrize(("seed", "interval"), [(1, 60.0), (2, 300.0)])
def test_the_engines_shortcuts_change_no_decision(
    policy: str, workload: Callable[[int], list[TraceJob]], seed: int, interval: float
) -> None:
    """Kept ranks, priorities computed once per remaining time, running jobs' requests
    left stale, the next refresh kept rather than searched for, GPU views looked up
    rather than made, and sweeps held only while the job before is active (``_swept``,
    ``_unhold``): a run without any of them is the same run, down to the GPUs."""
    jobs = workload(seed)
    cluster = parse_cluster("3x8")
    config = SimConfig(cycle_interval=interval)
    fast = Simulator(jobs, cluster, POLICIES[policy], config)
    slow = _Uncached(jobs, cluster, POLICIES[policy], config)
    kept, reference = fast.run(), slow.run()
    assert kept.preemptions > 0 or policy == "priority"
    assert kept.cycles == reference.cycles
    assert [(j.job_id, j.start, j.end, j.preemptions) for j in kept.jobs] == [
        (j.job_id, j.start, j.end, j.preemptions) for j in reference.jobs
    ]
    assert fast.first_placements() == slow.first_placements()
    assert kept.utilization == reference.utilization


def test_a_whole_gpu_flips_between_two_views() -> None:
    """Jobs taking and letting go of the same GPUs again and again reuse the views
    they made the first time: the engine keeps one view per state of a GPU."""
    jobs = [TraceJob(f"j{i}", 100.0 * i, 50.0, 8) for i in range(20)]
    simulator = Simulator(jobs, parse_cluster("1x8"), POLICIES["fifo"])
    record = simulator.run()
    assert all(j.end is not None for j in record.jobs)
    assert len(simulator._states) == 16  # eight GPUs, each idle or taken
    assert all(not g.exclusive for g in simulator._nodes["node-0000"].gpus)


def test_the_fast_node_copy_equals_dataclasses_replace_on_every_field() -> None:
    view = replace(
        parse_cluster("1x8:H100").node_views()[0],
        available=False,
        unavailable_reason="drained",
        labels=(("zone", "a"),),
        taints=(Taint(key="gpu", value="x", effect="NoSchedule"),),
        cpus=64.0,
        used_cpus=3.0,
    )
    gpus = view.gpus[::-1]
    assert _with_gpus(view, gpus, 5.0) == replace(view, gpus=gpus, used_cpus=5.0)


def test_the_positional_running_view_names_every_field() -> None:
    trace = TraceJob("t", 3.0, 100.0, 2, queue="vision", max_runtime=500.0, cpus=4.0)
    request = JobRequest(7, 2, 3.0, priority=-1, queue="vision", max_runtime=500.0, cpus=4.0)
    job = _Job(trace, request, 100.0, state="stopping", attempt_start=9.0, preempted_for=3)
    job.priority = -42
    job.restart_cost, job.checkpoint, job.estimated_end = 70.0, 600.0, 400.0
    part = Placement(7, "node-1", ("u0", "u1"), 1024)
    assert _running_view(job, part) == RunningJob(
        id=7,
        queue="vision",
        priority=-42,
        node="node-1",
        gpu_uuids=("u0", "u1"),
        memory_per_gpu=1024,
        started_at=9.0,
        submitted_at=3.0,
        max_runtime=500.0,
        preemptible=True,
        stopping=True,
        preempted_for=3,
        cpus=4.0,
        restart_cost=70.0,
        checkpoint_interval=600.0,
        estimated_end=400.0,
    )


class _SeesTheCollector(Simulator):
    """Notes the collector's thresholds while the replay runs; fails when told to."""

    seen: tuple[int, int, int] | None = None
    fail = False

    def _run(self) -> RunRecord:
        self.seen = gc.get_threshold()
        if self.fail:
            raise RuntimeError("replay failed")
        return super()._run()


@pytest.mark.parametrize("fail", [False, True])
def test_a_replay_collects_young_garbage_less_often_and_restores_the_collector(
    fail: bool,
) -> None:
    jobs = [TraceJob("a", 0.0, 100.0, 1), TraceJob("b", 5.0, 50.0, 2)]
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        sim = _SeesTheCollector(jobs, parse_cluster("1x8"), POLICIES["fifo"], SimConfig())
        sim.fail = fail
        if fail:
            with pytest.raises(RuntimeError, match="replay failed"):
                sim.run()
        else:
            assert len(sim.run().jobs) == 2
        assert sim.seen == (GC_YOUNG, 10, 10)
        assert gc.get_threshold() == (700, 10, 10)
        assert gc.get_freeze_count() == 0

        gc.set_threshold(0, 10, 10)  # automatic collection off: left off
        sim = _SeesTheCollector(jobs, parse_cluster("1x8"), POLICIES["fifo"], SimConfig())
        sim.run()
        assert sim.seen == (0, 10, 10)
        assert gc.get_threshold() == (0, 10, 10)
    finally:
        gc.set_threshold(*before)
