"""What a restart costs in a replay: the work redone, the work since the last checkpoint,
the GPU time lost, and preemptions that stay few however dear a restart is."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpudock.config import SchedulerConfig
from gpudock.sim.cluster import parse_cluster
from gpudock.sim.engine import SimConfig, simulate
from gpudock.sim.metrics import summarize
from gpudock.sim.policies import POLICIES
from gpudock.sim.results import RunRecord
from gpudock.sim.traces import TraceJob, load_trace

SAMPLE = Path(__file__).resolve().parents[3] / "traces" / "sample.csv"


def by_id(record: RunRecord) -> dict[str, tuple[float | None, int, float]]:
    return {j.job_id: (j.end, j.preemptions, j.lost) for j in record.jobs}


# a (8 GPUs, 100 s) runs from 0; b (8 GPUs, 10 s) arrives at 30: the oracle, with the server's
# rules (no protected time), preempts a (b's 10 s against a's 70 s left gains 60 s, more than
# the 15 s a restart costs a: 5 s redone and 10 s of grace)
PAIR = [TraceJob("a", 0.0, 100.0, 8), TraceJob("b", 30.0, 10.0, 8)]
ORACLE = replace(POLICIES["srtf-oracle"], scheduler=SchedulerConfig())


def test_a_restart_redoes_its_overhead_and_the_run_since_the_last_checkpoint() -> None:
    """a checkpoints every 20 s: preempted 30 s in, it loses 10 s of run and redoes 5 s.
    It held 8 GPUs for 10 s of grace without progress: (10 + 5 + 10) x 8 GPU-seconds."""
    config = SimConfig(restart_overhead=5.0, checkpoint_interval=20.0)
    record = simulate(PAIR, parse_cluster("1x8"), ORACLE, config)
    jobs = by_id(record)
    assert jobs["b"][:2] == (50.0, 0)  # starts at 40, after a's 10 s of grace
    assert jobs["a"] == (50.0 + 70.0 + 10.0 + 5.0, 1, (10.0 + 5.0 + 10.0) * 8)
    figures = summarize(record)
    assert figures["restart_overhead_s"] == 5.0 and figures["checkpoint_interval_s"] == 20.0
    assert figures["preemptions_per_job"] == 0.5 and figures["most_preemptions"] == 1
    assert figures["lost_gpu_hours"] == round(200.0 / 3600, 2)


def test_a_trace_job_s_own_cost_overrides_the_run_s() -> None:
    """a declares 60 s of overhead: the oracle's scheduler is told (a restart costs a 70 s,
    more than the 60 s b would gain), so b waits instead of preempting."""
    dear = [TraceJob("a", 0.0, 100.0, 8, restart_overhead=60.0), PAIR[1]]
    record = simulate(dear, parse_cluster("1x8"), ORACLE, SimConfig())
    assert by_id(record) == {"a": (100.0, 0, 0.0), "b": (110.0, 0, 0.0)}


@pytest.fixture(scope="module")
def contended() -> list[TraceJob]:
    """The sample trace's first 150 jobs, on a cluster a third of the size they want."""
    return load_trace(SAMPLE, "canonical").jobs[:150]


@pytest.mark.parametrize("policy", ["default", "srtf-oracle"])
def test_preemptions_per_job_stay_bounded_as_a_restart_gets_dearer(
    contended: list[TraceJob], policy: str
) -> None:
    """Free restarts (the 10 s grace), a minute, five minutes: a few preemptions per job at
    most, and fewer as a restart gets dearer. Before restarts were charged, ``default`` took
    turns without end here: 27 preemptions per job with free restarts, 432 at 300 s (one job
    2,522 times), and an average JCT of 1.5 million seconds."""
    cluster = parse_cluster("2x8")
    per_job, most = [], []
    for cost in (0.0, 60.0, 300.0):
        figures = summarize(
            simulate(contended, cluster, POLICIES[policy], SimConfig(restart_overhead=cost))
        )
        assert figures["unfinished"] == 0
        per_job.append(float(figures["preemptions_per_job"]))  # type: ignore[arg-type]
        most.append(int(figures["most_preemptions"]))  # type: ignore[call-overload]
    assert max(per_job) <= 2.5, per_job
    assert max(most) <= 30, most
    assert per_job[0] >= per_job[1] >= per_job[2], per_job
    assert most[0] >= most[2], most
