"""Preemption and the EASY reservation count host memory as they count CPUs.

A victim set must free the GPUs *and* the host memory the blocked job needs
on nodes that count memory; a node that could never hold the job's memory is
not preempted on; a reservation starts when the memory frees too, not only
the GPUs, so a job that ends before then may backfill. Each plan is also the
generic path's (``run_cycle(..., index=False)``).
"""

from __future__ import annotations

from tests.unit.scheduler.builders import (
    gpu_indices,
    make_job,
    make_node,
    make_running,
    make_snapshot,
    placement_of,
)

from gpudock.config import SchedulerConfig
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import Plan, Snapshot

NOW = 1000.0


def run_both(snapshot: Snapshot) -> Plan:
    """The default (accelerated) plan, checked equal to the generic path's."""
    profile = build_profile(SchedulerConfig())
    plan = run_cycle(snapshot, profile)
    assert plan == run_cycle(snapshot, profile, index=False)
    return plan


def victims(plan: Plan) -> list[int]:
    return sorted(p.victim_id for p in plan.preemptions)


def test_a_preemption_frees_enough_host_memory_not_only_gpus() -> None:
    """GPU 3 is free, but only 10GiB of memory: the youngest victim (11) would free a GPU
    the job does not need and too little memory. Job 10 alone frees the 50GiB."""
    node = make_node("n0").gpus(4).memory("100GiB")
    running = [
        make_running(10).on("n0", 0).memory("70GiB").started(100),
        make_running(11).on("n0", 1).memory("10GiB").started(900),
        make_running(12).on("n0", 2).memory("10GiB").started(800),
    ]
    urgent = make_job(20).gpus(1).memory("50GiB").priority(100)
    plan = run_both(make_snapshot([node], [urgent], now=NOW, running=running))
    assert victims(plan) == [10]
    assert plan.pending[20][0].message == "preempting job 10 (priority 0) on node n0"


def test_a_victim_set_that_frees_gpus_but_not_memory_is_not_chosen() -> None:
    """On n0 the cheapest victim (priority 0) frees both GPUs, but a protected job keeps
    56GiB of its 64GiB: too little for the job. n1's dearer victim frees enough."""
    nodes = [make_node("n0").gpus(2).memory("64GiB"), make_node("n1").gpus(2).memory("64GiB")]
    running = [
        make_running(20).on("n0", 0, 1).memory("8GiB").started(500),
        make_running(21).on("n0").memory("56GiB").not_preemptible(),  # no GPUs, only memory
        make_running(30).on("n1", 0, 1).memory("40GiB").priority(1).started(500),
    ]
    urgent = make_job(1).gpus(2).memory("32GiB").priority(10)
    plan = run_both(make_snapshot(nodes, [urgent], now=NOW, running=running))
    assert victims(plan) == [30]
    assert plan.pending[1][0].message == "preempting job 30 (priority 1) on node n1"


def test_no_preemption_on_a_node_with_too_little_memory_in_all() -> None:
    node = make_node("n0").gpus(2).memory("64GiB")
    running = [make_running(10).on("n0", 0, 1).memory("8GiB")]
    urgent = make_job(1).gpus(2).memory("128GiB").priority(10)
    plan = run_both(make_snapshot([node], [urgent], now=NOW, running=running))
    assert plan.preemptions == []
    assert plan.pending[1][0].message == "needs 128GiB memory; the largest node has 64GiB (n0)"


def reserved_cluster(*later: object) -> Snapshot:
    """n0: job 10 (GPU 0, 10GiB) ends at 3600, job 11 (GPU 1, 80GiB) at 7200; GPUs 2-3 and
    10GiB are free. Job 1 (3 GPUs, 50GiB) cannot preempt: it gets the EASY reservation."""
    node = make_node("n0").gpus(4).memory("100GiB")
    running = [
        make_running(10).on("n0", 0).memory("10GiB").started(0).max_runtime(3600),
        make_running(11).on("n0", 1).memory("80GiB").started(0).max_runtime(7200),
    ]
    big = make_job(1).gpus(3).memory("50GiB").priority(10).cannot_preempt()
    return make_snapshot([node], [big, *later], now=NOW, running=running)  # type: ignore[list-item]


def test_the_reservation_starts_when_the_memory_frees_not_only_the_gpus() -> None:
    """Job 10's end frees GPUs enough (0, 2, 3) but only 20GiB: the job waits for job 11."""
    plan = run_both(reserved_cluster())
    (reserved,) = plan.reservations
    assert (reserved.job_id, reserved.node, reserved.gpus, reserved.start) == (
        1,
        "n0",
        (0, 1, 2),
        7200.0,
    )
    eta = plan.pending[1][-1]
    assert eta.message == "next in line: GPUs 0-2 of n0 are reserved for it"
    assert eta.counterfactual.endswith("when jobs 10, 11 reach max_runtime")


def test_a_job_that_ends_before_the_memory_frees_backfills_onto_the_reserved_gpus() -> None:
    """Job 2 ends at 5000: after job 10 frees its GPU, before job 11 frees the memory."""
    short = make_job(2).gpus(2).memory("5GiB").max_runtime(4000).submitted(1)
    plan = run_both(reserved_cluster(short))
    placed = placement_of(plan, 2)
    assert placed is not None and gpu_indices(placed) == [2, 3]


def test_a_job_that_ends_after_the_memory_frees_does_not_take_the_reserved_gpus() -> None:
    late = make_job(2).gpus(2).memory("5GiB").max_runtime(7000).submitted(1)  # ends at 8000
    plan = run_both(reserved_cluster(late))
    assert placement_of(plan, 2) is None
    assert plan.pending[2][0].message.startswith("GPU 2 of n0 is reserved for job 1")
