"""The simulator engine: hand-computed traces whose start and end times are known exactly.

Each scenario states the expected timeline in its docstring; times are
seconds on the virtual clock. ``Recorder`` logs every start and stop the
engine applies, so tests can check *when* a decision was taken and *where*.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpudock.queue.config import QueuesConfig
from gpudock.scheduler.snapshot import Placement
from gpudock.sim.cluster import ClusterSpec, NodeGroup, parse_cluster
from gpudock.sim.engine import SWEEP_GAP, SimConfig, Simulator, _Job, simulate
from gpudock.sim.estimate import SIBLING_GAP, RemainingEstimator, gpu_bucket
from gpudock.sim.metrics import summarize
from gpudock.sim.policies import POLICIES
from gpudock.sim.results import JobRecord, RunRecord
from gpudock.sim.traces import TraceJob, load_trace

Job = TraceJob
Entry = tuple[float, str, str, tuple[str, ...]]


class Recorder(Simulator):
    """A ``Simulator`` that logs ``(time, "start"|"stop", job_id, nodes)`` as it applies plans."""

    log: list[Entry]

    def run(self) -> RunRecord:
        self.log = []
        return super().run()

    def _start(self, job: _Job, parts: tuple[Placement, ...], now: float) -> None:
        self.log.append((now, "start", job.trace.job_id, tuple(p.node for p in parts)))
        super()._start(job, parts, now)

    def _stop(self, job: _Job, preemptor: int, now: float) -> None:
        self.log.append((now, "stop", job.trace.job_id, tuple(p.node for p in job.parts)))
        super()._stop(job, preemptor, now)


def run(
    policy: str, jobs: Sequence[TraceJob], cluster: str | ClusterSpec = "1x8", **config: Any
) -> RunRecord:
    spec = parse_cluster(cluster) if isinstance(cluster, str) else cluster
    return simulate(jobs, spec, POLICIES[policy], SimConfig(**config))


def recorded(
    policy: str, jobs: Sequence[TraceJob], cluster: str | ClusterSpec = "1x8", **config: Any
) -> tuple[RunRecord, list[Entry]]:
    spec = parse_cluster(cluster) if isinstance(cluster, str) else cluster
    sim = Recorder(jobs, spec, POLICIES[policy], SimConfig(**config))
    return sim.run(), sim.log


def by_id(record: RunRecord) -> dict[str, JobRecord]:
    return {job.job_id: job for job in record.jobs}


def timeline(record: RunRecord) -> dict[str, tuple[float | None, float | None]]:
    """job_id -> (first start, end)."""
    return {job.job_id: (job.start, job.end) for job in record.jobs}


def jcts(record: RunRecord) -> dict[str, float | None]:
    return {job.job_id: job.jct for job in record.jobs}


# a(t=0, 100 s, 8 GPUs), b(t=10, 50 s, 8), c and d(t=20, 10 s, 4 each) on 1x8
FOUR = [Job("a", 0, 100, 8), Job("b", 10, 50, 8), Job("c", 20, 10, 4), Job("d", 20, 10, 4)]
FOUR_CSV = "job_id,submit_time,duration,num_gpus\na,0,100,8\nb,10,50,8\nc,20,10,4\nd,20,10,4\n"


# ── fifo ──────────────────────────────────────────────────────────────────


def test_fifo_runs_in_arrival_order_from_a_canonical_csv(tmp_path: Path) -> None:
    """a 0-100, b 100-150, then c and d together 150-160."""
    path = tmp_path / "four.csv"
    path.write_text(FOUR_CSV)
    record = run("fifo", load_trace(path).jobs)
    assert timeline(record) == {
        "a": (0, 100),
        "b": (100, 150),
        "c": (150, 160),
        "d": (150, 160),
    }
    assert jcts(record) == {"a": 100, "b": 140, "c": 140, "d": 140}
    assert record.preemptions == 0
    assert record.horizon == 160


def test_fifo_head_of_line_blocks_a_small_job_that_priority_backfills() -> None:
    """2x8: a (8) fills node 0, b (4) half of node 1. ``big`` (8) must wait for a;
    under fifo ``small`` (4) waits behind it although 4 GPUs are free on node 1;
    under ``priority`` small backfills at once and ends before big could start."""
    jobs = [
        Job("a", 0, 100, 8),
        Job("b", 0, 100, 4),
        Job("big", 10, 50, 8),
        Job("small", 20, 10, 4),
    ]
    fifo = timeline(run("fifo", jobs, "2x8"))
    assert fifo["big"] == (100, 150)
    assert fifo["small"] == (100, 110)
    priority = timeline(run("priority", jobs, "2x8"))
    assert priority["big"] == (100, 150)
    assert priority["small"] == (20, 30)


def test_fifo_blocks_behind_a_gang_waiting_for_two_free_nodes() -> None:
    """2x8: s holds node 0 until 50; gang g (16) needs both nodes; t (8) would fit on
    node 1 now, but strict FIFO keeps it behind g: g 50-150, t 150-160."""
    jobs = [Job("s", 0, 50, 8), Job("g", 0, 100, 16), Job("t", 0, 10, 8)]
    assert timeline(run("fifo", jobs, "2x8")) == {
        "s": (0, 50),
        "g": (50, 150),
        "t": (150, 160),
    }


# ── sjf-oracle ────────────────────────────────────────────────────────────


def test_sjf_runs_a_queue_released_together_shortest_first() -> None:
    """All at t=0 on 1x8: b (10 s) 0-10, c (20 s) 10-30, a (30 s) 30-60; fifo keeps file order."""
    jobs = [Job("a", 0, 30, 8), Job("b", 0, 10, 8), Job("c", 0, 20, 8)]
    assert timeline(run("sjf-oracle", jobs)) == {"a": (30, 60), "b": (0, 10), "c": (10, 30)}
    assert timeline(run("fifo", jobs)) == {"a": (0, 30), "b": (30, 40), "c": (40, 60)}


def test_sjf_picks_the_shorter_waiting_jobs_when_the_gpus_free_up() -> None:
    """FOUR: when a ends at 100, c and d (10 s) go before b (50 s): c,d 100-110, b 110-160."""
    record = run("sjf-oracle", FOUR)
    assert timeline(record) == {
        "a": (0, 100),
        "b": (110, 160),
        "c": (100, 110),
        "d": (100, 110),
    }
    assert record.preemptions == 0


def test_sjf_is_not_preemptive_but_srtf_is() -> None:
    """long (100 s) runs from 0; short (5 s) arrives at 10. SJF: short waits, 100-105.
    SRTF: short preempts long at 10, long holds its GPUs until 20, short 20-25, long
    resumes at 25 with 90 s left and ends at 115."""
    jobs = [Job("long", 0, 100, 8), Job("short", 10, 5, 8)]
    sjf = run("sjf-oracle", jobs)
    assert timeline(sjf) == {"long": (0, 100), "short": (100, 105)}
    assert sjf.preemptions == 0
    srtf = run("srtf-oracle", jobs)
    assert timeline(srtf) == {"long": (0, 115), "short": (20, 25)}
    assert srtf.preemptions == 1


# ── srtf-oracle: preemption timing ────────────────────────────────────────


def test_srtf_preemption_timing_with_the_default_grace() -> None:
    """b preempts a at 10; a makes no progress from 10 and holds its GPUs until 20;
    c and d (10 s left) take them 20-30; b runs 30-80; a resumes with 90 s left, ends 170."""
    record, log = recorded("srtf-oracle", FOUR)
    assert timeline(record) == {
        "a": (0, 170),
        "b": (30, 80),
        "c": (20, 30),
        "d": (20, 30),
    }
    assert jcts(record) == {"a": 170, "b": 70, "c": 10, "d": 10}
    assert summarize(record)["avg_jct_s"] == 65.0
    assert [(t, what, job) for t, what, job, _ in log if what == "stop"] == [(10, "stop", "a")]
    assert [t for t, what, job, _ in log if job == "a" and what == "start"] == [0, 80]
    jobs = by_id(record)
    assert record.preemptions == jobs["a"].preemptions == 1
    # a held 8 GPUs 0-20 (10 s of them without progress) and 80-170: 110 s x 8
    assert jobs["a"].service == 880


def test_srtf_without_grace_releases_at_once() -> None:
    """preempt_grace=0: b preempts a at 10 and starts at 10; c and d preempt b at 20
    (10 s < b's 40 s left) and run 20-30; b resumes 30-70; a resumes 70-160."""
    record = run("srtf-oracle", FOUR, preempt_grace=0)
    assert timeline(record) == {
        "a": (0, 160),
        "b": (10, 70),
        "c": (20, 30),
        "d": (20, 30),
    }
    assert jcts(record) == {"a": 160, "b": 60, "c": 10, "d": 10}
    assert {j.job_id: j.preemptions for j in record.jobs} == {"a": 1, "b": 1, "c": 0, "d": 0}
    assert record.preemptions == 2


def test_srtf_restart_overhead_is_redone_after_each_restart() -> None:
    """restart_overhead=5: a resumes at 80 with 90 + 5 s of work and ends at 175."""
    record = run("srtf-oracle", FOUR, restart_overhead=5)
    assert timeline(record) == {
        "a": (0, 175),
        "b": (30, 80),
        "c": (20, 30),
        "d": (20, 30),
    }
    assert by_id(record)["a"].service == (20 + 95) * 8


# ── default: learnt estimates, never true durations ───────────────────────


def test_default_without_history_is_least_attained_service() -> None:
    """No job has finished, so every rank is the attained time (at least 1 s), and with
    no preemption margin the job with less service runs, re-checked at 30 s refresh ticks.
    At 100 b (0 s) preempts a (100 s); a holds its GPUs until 110, b runs from 110.
    At 150 c,d (0 s) preempt b (40 s): b releases at 160, c,d run 160-170. Then b
    (40 s) goes before a (100 s) from 170; at the 260 tick b has 130 s > 100 s: a runs
    270-330 (160 s > 130 s at the tick), b 340-400 (190 s), a 410-470 (220 s), b ends
    its last 10 s 480-490; a resumes with 780 s left: 490-1270. (b is of another queue
    than a: two jobs of one class submitted 100 s apart would form a sweep, below.)"""
    jobs = [Job("a", 0, 1000, 8), Job("b", 100, 200, 8, queue="other"), Job("c", 150, 10, 4)]
    jobs.append(Job("d", 150, 10, 4))
    record, log = recorded("default", jobs)
    assert timeline(record) == {
        "a": (0, 1270),
        "b": (110, 490),
        "c": (160, 170),
        "d": (160, 170),
    }
    stops = [(100, "a"), (150, "b"), (260, "b"), (330, "a"), (400, "b"), (470, "a")]
    assert [(t, job) for t, what, job, _ in log if what == "stop"] == stops
    assert record.preemptions == 6


def test_default_keeps_a_sweep_in_submission_order() -> None:
    """The same jobs, but a and b of one class (queue and GPU count) submitted 100 s
    apart: one sweep. b (0 s) ranks no better than a (100 s), and an equal rank does not
    preempt, so a keeps running. c,d (another class) preempt a at 150 as before (a has
    150 s, they 0 s): a releases at 160, c,d run 160-170. Then a goes first again
    (b waits behind it): a runs its last 850 s 170-1020, b 1020-1220."""
    jobs = [Job("a", 0, 1000, 8), Job("b", 100, 200, 8), Job("c", 150, 10, 4)]
    jobs.append(Job("d", 150, 10, 4))
    record, log = recorded("default", jobs)
    assert timeline(record) == {
        "a": (0, 1020),
        "b": (1020, 1220),
        "c": (160, 170),
        "d": (160, 170),
    }
    assert [(t, job) for t, what, job, _ in log if what == "stop"] == [(150, "a")]


def test_a_sweep_ends_where_submissions_pause() -> None:
    """b comes 121 s after a (more than ``SWEEP_GAP``): not a's sweep, so least attained
    service applies and b (0 s) preempts a (121 s) at once."""
    jobs = [Job("a", 0, 1000, 8), Job("b", SWEEP_GAP + 1, 200, 8)]
    _, log = recorded("default", jobs)
    assert (SWEEP_GAP + 1, "stop", "a", ("node-0000",)) in log


class SiblingLog(Simulator):
    """Logs each job's close sibling (the run time the estimator gave it) when it starts."""

    seen: dict[str, float | None]

    def _start(self, job: _Job, parts: tuple[Placement, ...], now: float) -> None:
        self.seen[job.trace.job_id] = job.sibling
        super()._start(job, parts, now)


def test_a_job_learns_its_close_sibling_when_that_one_finishes() -> None:
    """y, 5 s after x in x's class, waits behind x (its sweep); x finishes at 50, so y
    starts with x's run time as its close sibling. w comes 12 s after z: the same sweep,
    but further apart than ``SIBLING_GAP``, so no sibling; nor has x, the first."""
    jobs = [Job("x", 0, 50, 8), Job("y", 5, 100, 8), Job("z", 300, 30, 8)]
    jobs.append(Job("w", 300 + SIBLING_GAP + 2, 10, 8))
    sim = SiblingLog(jobs, parse_cluster("1x8"), POLICIES["default"])
    sim.seen = {}
    record = sim.run()
    assert timeline(record) == {"x": (0, 50), "y": (50, 150), "z": (300, 330), "w": (330, 340)}
    assert sim.seen == {"x": None, "y": 50, "z": None, "w": None}


def test_default_reevaluates_estimates_between_events() -> None:
    """FOUR, cycle_interval=5: a's priority is refreshed at most every 30 s, so b and c,d
    tie with it on arrival; but from a refresh tick on, a (30 s attained) has a far
    longer expected remaining time than the pending jobs (0 s) and is preempted, even
    though no job arrives or ends between 20 and a's end at 100."""
    record = run("default", FOUR, cycle_interval=5)
    start = by_id(record)["c"].start
    assert start is not None
    assert start < 100


def _workload(seed: int, count: int = 80) -> list[TraceJob]:
    """Mixed short (5-30 s) and long (200-600 s) jobs of 1-8 GPUs in two queues."""
    rng = random.Random(seed)
    jobs, now = [], 0.0
    for i in range(count):
        now += rng.expovariate(1 / 15)
        long = rng.random() < 0.3
        duration = rng.uniform(200, 600) if long else rng.uniform(5, 30)
        gpus = rng.choice([1, 2, 4, 8])
        jobs.append(Job(f"j{i}", round(now, 1), round(duration, 1), gpus, queue=f"q{i % 2}"))
    return jobs


def _decisions_before(policy: str, jobs: list[TraceJob], cutoff: float) -> list[Entry]:
    _, log = recorded(policy, jobs, "2x8")
    return [entry for entry in log if entry[0] < cutoff]


@pytest.mark.parametrize("seed", [1, 2])
def test_default_never_reads_the_durations_of_unfinished_jobs(seed: int) -> None:
    """Lengthen every job still unfinished at T (T: the 30th completion, so the
    estimator has history): every start and stop before T is unchanged. The SRTF
    oracle, which does read durations, changes its decisions before T."""
    jobs = _workload(seed)
    record = run("default", jobs, "2x8")
    cutoff = sorted(j.end for j in record.jobs if j.end is not None)[29]
    ends = {j.job_id: j.end for j in record.jobs}
    changed = [
        replace(j, duration=j.duration * 3) if (ends[j.job_id] or 0) > cutoff else j for j in jobs
    ]
    assert changed != jobs
    before = _decisions_before("default", jobs, cutoff)
    assert len(before) > 30
    assert _decisions_before("default", changed, cutoff) == before
    assert _decisions_before("srtf-oracle", changed, cutoff) != _decisions_before(
        "srtf-oracle", jobs, cutoff
    )


def test_estimator_expected_remaining_on_a_known_sample() -> None:
    """Finished 10, 20, 30, 100 s: E[D - a | D > a] over them."""
    estimator = RemainingEstimator(min_history=4, rule="mean")
    for duration in (30, 10, 100, 20):
        estimator.record("q", 1, duration)
    assert estimator.remaining("q", 1, 0) == 40  # mean of all four
    assert estimator.remaining("q", 1, 15) == 35  # (20 + 30 + 100) / 3 - 15
    assert estimator.remaining("q", 1, 20) == 45  # D > a strictly: (30 + 100) / 2 - 20
    assert estimator.remaining("q", 1, 50) == 50  # only 100 outlasts 50
    assert estimator.remaining("q", 1, 150) == 150  # none outlasts it: attained time
    estimator.record("q", 1, 300)  # a new finish is seen by the next estimate
    assert estimator.remaining("q", 1, 50) == 150  # (100 + 300) / 2 - 50


def test_estimator_falls_back_with_little_history() -> None:
    """A class (queue, GPU bucket) with under ``min_history`` finishes uses its GPU
    bucket's history, then all jobs'; with none at all, the attained time (>= 1 s)."""
    estimator = RemainingEstimator(min_history=2, rule="mean")
    assert estimator.remaining("x", 1, 0) == 1.0
    assert estimator.remaining("x", 1, 7) == 7.0
    estimator.record("x", 1, 10)
    assert estimator.remaining("x", 1, 0) == 1.0  # one finish is too little anywhere
    estimator.record("y", 1, 30)
    assert estimator.remaining("x", 1, 0) == 20  # bucket 1: 10, 30
    estimator.record("y", 8, 100)
    estimator.record("y", 8, 200)
    assert estimator.remaining("y", 8, 150) == 50  # its own class: only 200 outlasts 150
    assert estimator.remaining("z", 5, 0) == 150  # bucket 8 (5 GPUs round up): 100, 200
    assert estimator.remaining("z", 4, 0) == 85  # no bucket-4 history: all four
    assert estimator.remaining("y", 8, 250) == 250  # nobody outlasted it


def test_gpu_buckets() -> None:
    assert [gpu_bucket(g) for g in (0.25, 1, 2, 3, 4, 8, 12, 128)] == [1, 1, 2, 4, 4, 8, 16, 16]


# ── fair-share ────────────────────────────────────────────────────────────


def test_fair_share_queue_reclaims_from_a_borrowing_queue() -> None:
    """No declared queues: x and y each get 4 GPUs guaranteed in one cohort. x borrows
    all 8 for a; y's c,d arrive at 20 and reclaim: a is preempted at 20 and releases at
    30, c,d 30-40, a resumes 40-120, b (x) 120-170."""
    jobs = [
        Job("a", 0, 100, 8, queue="x"),
        Job("b", 10, 50, 8, queue="x"),
        Job("c", 20, 10, 4, queue="y"),
        Job("d", 20, 10, 4, queue="y"),
    ]
    record, log = recorded("fair-share", jobs)
    assert timeline(record) == {
        "a": (0, 120),
        "b": (120, 170),
        "c": (30, 40),
        "d": (30, 40),
    }
    assert [(t, job) for t, what, job, _ in log if what == "stop"] == [(20, "a")]
    assert record.preemptions == 1
    assert record.entitled == {"x": 0.5, "y": 0.5}
    per_queue = summarize(record)["per_queue"]
    assert isinstance(per_queue, dict)
    # x holds 8 GPUs 0-30 and 40-170 (160 s), y 8 GPUs 30-40: over a 170 s window
    assert per_queue["x"]["share_received"] == round(160 / 170, 4)
    assert per_queue["y"]["share_received"] == round(10 / 170, 4)


# ── static partitions ─────────────────────────────────────────────────────


def test_static_keeps_each_queue_on_its_own_nodes() -> None:
    """2x8, one node per queue: x2 waits for x1 (100-200) although y's node is idle
    from 10; xbig (16 GPUs: 2 nodes) never fits x's single node: refused, as a server
    refuses it at submit, in the partition filter's (``node_affinity``'s) words."""
    jobs = [
        Job("x1", 0, 100, 8, queue="x"),
        Job("x2", 0, 100, 8, queue="x"),
        Job("y1", 0, 10, 8, queue="y"),
        Job("xbig", 0, 10, 16, queue="x"),
    ]
    record, log = recorded("static", jobs, "2x8")
    assert timeline(record) == {"x1": (0, 100), "x2": (100, 200), "y1": (0, 10)}
    assert summarize(record)["unfinished"] == 0
    assert record.skipped_jobs == 1  # it fits the cluster, but not its partition
    assert list(record.refused.values()) == [["xbig"]]
    assert next(iter(record.refused)).endswith(
        "1 of 2 can (node node-0001 lacks label gpudock.sim/partition=x)"
    )
    nodes = {q: {n for _, _, job, ns in log for n in ns if job.startswith(q)} for q in "xy"}
    assert len(nodes["x"]) == len(nodes["y"]) == 1
    assert nodes["x"].isdisjoint(nodes["y"])
    shared = timeline(run("priority", jobs, "2x8"))  # no partitions: x2 starts at once
    assert shared["x2"] == (0, 100)


def test_static_partitions_nodes_by_declared_guarantee() -> None:
    """4x8, guarantees x 24 and y 8 GPUs: x gets 3 nodes, y 1; y's two jobs run in turn."""
    queues = QueuesConfig.model_validate(
        {
            "cohorts": ["c"],
            "queues": [
                {"name": "x", "cohort": "c", "guarantee": {"gpus": 24}},
                {"name": "y", "cohort": "c", "guarantee": {"gpus": 8}},
            ],
        }
    )
    jobs = [Job(f"y{i}", 0, 10, 8, queue="y") for i in range(2)]
    jobs += [Job(f"x{i}", 0, 10, 8, queue="x") for i in range(3)]
    record = run("static", jobs, ClusterSpec((NodeGroup(4, 8),), queues))
    assert timeline(record) == {
        "y0": (0, 10),
        "y1": (10, 20),
        "x0": (0, 10),
        "x1": (0, 10),
        "x2": (0, 10),
    }
    assert record.entitled == {"x": 0.75, "y": 0.25}


# ── gangs, skipped jobs, shared GPUs ──────────────────────────────────────


def test_a_wide_job_runs_as_a_gang_of_whole_nodes_at_once() -> None:
    """4x8: g (16 GPUs) runs as 2 x 8 on two nodes from 0; huge (64) can never fit."""
    jobs = [Job("g", 0, 100, 16), Job("s", 0, 50, 8), Job("huge", 0, 10, 64)]
    record, log = recorded("priority", jobs, "4x8")
    assert record.skipped_jobs == 1
    assert timeline(record) == {"g": (0, 100), "s": (0, 50)}  # huge is not replayed
    [(at, _, _, nodes)] = [entry for entry in log if entry[2] == "g"]
    assert at == 0
    assert len(set(nodes)) == 2
    g = by_id(record)["g"]
    assert (g.gpus, g.service) == (16, 1600)


def test_a_gang_waits_until_all_its_nodes_are_free() -> None:
    """2x8: s holds node 0 until 50; g (16) starts only then, on both nodes at once."""
    record = run("priority", [Job("s", 0, 50, 8), Job("g", 0, 100, 16)], "2x8")
    assert timeline(record) == {"s": (0, 50), "g": (50, 150)}
    assert record.utilization == [(0, 8), (50, 16), (150, 0)]


def test_a_job_that_can_never_fit_is_refused_with_the_filters_reason() -> None:
    record = run("fifo", [Job("huge", 0, 10, 64), Job("ok", 5, 10, 8)], "2x8")
    assert record.skipped_jobs == 1
    assert [j.job_id for j in record.jobs] == ["ok"]
    assert timeline(record) == {"ok": (5, 15)}
    why = "needs 8 nodes (a gang) that can each take 8 GPUs; the cluster has 2 nodes"
    assert record.refused == {why: ["huge"]}
    assert summarize(record)["skipped_jobs"] == 1
    assert summarize(record)["refused"] == {why: 1}


def test_a_job_its_queue_could_never_admit_is_skipped_as_the_server_refuses_it() -> None:
    """Declared queues: a job above its queue's limit, or of an undeclared queue, would be
    refused at submit by the server (``never_admitted_on``), so it is not replayed; its
    reason is the server's. A job no node could run either is refused, as the server does,
    for the nodes first (the profile's filters)."""
    queues = QueuesConfig.model_validate({"queues": [{"name": "x", "limit": {"gpus": 4}}]})
    cluster = replace(parse_cluster("1x8"), queues=queues)
    jobs = [
        Job("big", 0, 10, 8, queue="x"),
        Job("typo", 0, 10, 1, queue="y"),
        Job("ok", 0, 10, 4, queue="x"),
        Job("huge", 0, 10, 16, queue="y"),
    ]

    record = run("fair-share", jobs, cluster)

    assert record.skipped_jobs == 3
    assert timeline(record) == {"ok": (0, 10)}
    assert record.refused == {
        "needs 8 GPUs but queue x's limit is 4 GPUs": ["big"],
        "queue 'y' does not exist (declared queues: default, x)": ["typo"],
        "needs 2 nodes (a gang) that can each take 8 GPUs; the cluster has 1 node": ["huge"],
    }


def test_half_gpu_jobs_pack_two_per_gpu() -> None:
    """1x2: four 0.5-GPU jobs run at once; the fifth waits for one to end."""
    jobs = [Job(f"s{i}", 0, 100, 1, gpu_fraction=0.5) for i in range(5)]
    record = run("fifo", jobs, "1x2")
    assert timeline(record) == {f"s{i}": (0, 100) for i in range(4)} | {"s4": (100, 200)}
    assert record.utilization == [(0, 2.0), (100, 0.5), (200, 0)]


def test_shared_jobs_ask_for_their_fraction_of_gpu_memory() -> None:
    """1x1: p (0.75) and r (0.25) fill the GPU's memory; q (0.5) waits for p."""
    jobs = [
        Job("p", 0, 100, 1, gpu_fraction=0.75),
        Job("q", 0, 10, 1, gpu_fraction=0.5),
        Job("r", 0, 10, 1, gpu_fraction=0.25),
    ]
    assert timeline(run("priority", jobs, "1x1")) == {
        "p": (0, 100),
        "q": (100, 110),
        "r": (0, 10),
    }


# ── utilization, metrics, world knobs, determinism ────────────────────────


def test_utilization_and_summary_of_a_hand_computed_run() -> None:
    """The HOL run under fifo on 2x8: 12 GPUs busy 0-110 (a, b; then big, small),
    8 GPUs 110-150 (big): 1640 GPU-s of 16 x 150."""
    jobs = [
        Job("a", 0, 100, 8),
        Job("b", 0, 100, 4),
        Job("big", 10, 50, 8),
        Job("small", 20, 10, 4),
    ]
    record = run("fifo", jobs, "2x8")
    assert record.utilization == [(0, 12), (100, 12), (110, 8), (150, 0)]
    summary = summarize(record)
    assert summary["gpu_utilization"] == round(1640 / (16 * 150), 4)
    assert summary["makespan_s"] == 150
    assert summary["avg_jct_s"] == 107.5  # (100 + 100 + 140 + 90) / 4
    assert summary["p50_jct_s"] == 100
    assert summary["p99_jct_s"] == 140
    assert summary["avg_queue_delay_s"] == 42.5  # (0 + 0 + 90 + 80) / 4
    assert (summary["jobs"], summary["unfinished"], summary["preemptions"]) == (4, 0, 0)


def test_cycle_interval_batches_events_into_periods() -> None:
    """cycle_interval=30 under fifo: a ends at 100 but b starts at the next cycle, 120
    (ends 170); c,d at the cycle at 180."""
    assert timeline(run("fifo", FOUR, cycle_interval=30)) == {
        "a": (0, 100),
        "b": (120, 170),
        "c": (180, 190),
        "d": (180, 190),
    }


def test_horizon_stops_the_run_early() -> None:
    record = run("fifo", FOUR, horizon=120)
    assert timeline(record) == {
        "a": (0, 100),
        "b": (100, None),
        "c": (None, None),
        "d": (None, None),
    }
    assert record.horizon == 120
    assert summarize(record)["unfinished"] == 3


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_the_same_run_twice_gives_identical_records(policy: str) -> None:
    jobs = _workload(7, count=60)
    first, second = run(policy, jobs, "2x8"), run(policy, jobs, "2x8")
    assert replace(first, sim_seconds=0.0) == replace(second, sim_seconds=0.0)
    assert len(first.jobs) == 60


def test_default_ranks_whole_node_jobs_from_their_queues_jobs_of_every_size() -> None:
    """The simulator tells its estimator the GPUs of its largest node: on 4-GPU nodes a
    4-GPU job is ranked from its queue's finishes of every GPU count (twenty 10 s jobs
    of 1 GPU, twenty 1000 s jobs of 4: a quantum to 10 s completes half of them for
    10 s of service, 1 / G = 20 s), where its size class alone says 1000 s."""
    jobs = [TraceJob(f"s{i}", 0.0, 10.0, 1) for i in range(20)]
    jobs += [TraceJob(f"l{i}", 0.0, 1000.0, 4) for i in range(20)]
    simulator = Simulator(jobs, parse_cluster("2x4"), POLICIES["default"])
    simulator.run()
    assert simulator._estimator.remaining("default", 4, 0) == pytest.approx(20)
    assert simulator._estimator.remaining("default", 3, 0) == pytest.approx(1000)  # bucket 4
