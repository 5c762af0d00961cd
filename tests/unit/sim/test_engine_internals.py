"""Internals of the simulator's engine that its speed depends on."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import replace

import pytest

from gpudock.core.affinity import Toleration
from gpudock.scheduler.snapshot import JobRequest
from gpudock.sim.cluster import parse_cluster
from gpudock.sim.engine import Simulator, _Job, _with_priority
from gpudock.sim.policies import POLICIES
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


class _CountingRanks(Simulator):
    """Counts how often each job's remaining time is computed."""

    calls: Counter[str]

    def _remaining(self, job: _Job, ran: float) -> float:
        self.calls[job.trace.job_id] += 1
        return super()._remaining(job, ran)


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

    def _remaining(self, job: _Job, ran: float) -> float:
        job.rank_changes = -1
        return super()._remaining(job, ran)


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
