"""Elastic jobs in the simulator: the scheduler's decisions (grow, resize, shrink) applied
as the server applies them, on hand-computed timelines.

An elastic job's work scales linearly with its GPUs: ``duration`` is its run time at
its minimum, so on twice the GPUs it runs twice as fast. A restart keeps the work done
(as a checkpointing job would).
"""

from __future__ import annotations

from gpudock.sim.cluster import parse_cluster
from gpudock.sim.engine import SimConfig, simulate
from gpudock.sim.policies import POLICIES
from gpudock.sim.results import RunRecord
from gpudock.sim.traces import TraceJob


def run(jobs: list[TraceJob], grace: float = 0.0) -> RunRecord:
    return simulate(jobs, parse_cluster("1x4"), POLICIES["fifo"], SimConfig(preempt_grace=grace))


def ends(record: RunRecord) -> dict[str, float | None]:
    return {job.job_id: job.end for job in record.jobs}


def elastic(job_id: str, at: float, duration: float, low: int, high: int) -> TraceJob:
    return TraceJob(job_id, at, duration, low, max_gpus=high, elastic_restart=True)


def test_an_elastic_job_alone_runs_on_its_maximum_and_faster() -> None:
    """e gets all 4 GPUs at once: 100 s of work at 2 GPUs takes 50 s."""
    record = run([elastic("e", 0, 100, 2, 4)])
    assert ends(record) == {"e": 50.0}
    assert record.resizes == 0


def test_a_running_job_is_restarted_on_more_gpus_once_they_free_up() -> None:
    """a holds 2 GPUs to t=50, so e starts at its minimum (t=1) and does 49 s of work;
    at t=50 it is resized: stopping for the 10 s grace, then 51 s of work at twice the
    speed, 25.5 s: it ends at 85.5."""
    record = run([TraceJob("a", 0, 50, 2), elastic("e", 1, 100, 2, 4)], grace=10.0)
    assert ends(record) == {"a": 50.0, "e": 85.5}
    assert record.resizes == 1 and record.preemptions == 0


def test_a_waiting_job_takes_back_the_gpus_above_the_minimum() -> None:
    """e runs on 4 (speed 2) from t=0. b arrives at t=10 and needs 2: e restarts at its
    minimum (20 s of its work done), b runs 10 s; at t=20 e grows back to 4 (10 more s
    done at speed 1), and its last 70 s take 35 s: it ends at 55."""
    record = run([elastic("e", 0, 100, 2, 4), TraceJob("b", 10, 10, 2)])
    assert ends(record) == {"e": 55.0, "b": 20.0}
    assert (record.preemptions, record.resizes) == (1, 1)


def test_without_elastic_restart_the_job_only_grows_when_it_starts() -> None:
    """e starts at its minimum beside a and never grows: 100 s at 2 GPUs."""
    jobs = [TraceJob("a", 0, 50, 2), TraceJob("e", 1, 100, 2, max_gpus=4)]
    assert ends(run(jobs)) == {"a": 50.0, "e": 101.0}
