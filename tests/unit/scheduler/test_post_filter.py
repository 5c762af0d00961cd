"""Every step asks the profile's filters, on the node as it would be (kube-scheduler's PostFilter).

A filter that admits a job only on node A is heard by placement, preemption, the EASY
reservation, elastic jobs giving back GPUs, and the submit-time check, whether it is a
built-in one (GPU model, node selector, taint) or one the accelerator knows nothing
of. Each scenario runs on the accelerated and on the generic path, and both give the
same Plan. The undeclared filter here rejects as "not now" (``UNSCHEDULABLE``), the
status a cordon gives, so that only the filters on the node as it would be keep the
steps off node B.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from gpudock.config import SchedulerConfig
from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import NodeState
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.feasibility import never_fits
from gpudock.scheduler.framework import SUCCESS, Profile, Rejection, Status
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import JobRequest, Plan, Snapshot

from .builders import (
    JobBuilder,
    NodeBuilder,
    assert_placed,
    make_job,
    make_node,
    make_running,
    make_snapshot,
)


class OnlyNode:
    """A filter the accelerator does not know: every node but ``allowed`` is "not now"."""

    name = "only_node"
    layer = "health"

    def __init__(self, allowed: str = "a") -> None:
        self.allowed = allowed

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if node.name == self.allowed:
            return SUCCESS
        return Status.unschedulable(self.layer, f"node {node.name} is kept for others")

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        names = ", ".join(r.node.name for r in rejections)
        return PendingReason(self.layer, f"kept for others: {names}")


DEFAULT = build_profile(SchedulerConfig())
UNKNOWN = replace(DEFAULT, filters=(*DEFAULT.filters, OnlyNode()))

Case = tuple[str, Profile, NodeBuilder, NodeBuilder, JobBuilder]


def cases(gpus: int) -> list[Case]:
    """Nodes a and b of ``gpus`` GPUs each and a job only a admits, four ways."""
    return [
        ("gpu model", DEFAULT, make_node("a").gpus(gpus, model="H100"),
         make_node("b").gpus(gpus, model="A100-80GB"), make_job(1).model("H100")),
        ("node selector", DEFAULT, make_node("a").gpus(gpus).label("zone", "eu"),
         make_node("b").gpus(gpus), make_job(1).selector("zone", "eu")),
        ("taint", DEFAULT, make_node("a").gpus(gpus),
         make_node("b").gpus(gpus).taint("dedicated=infra:NoSchedule"), make_job(1)),
        ("unknown filter", UNKNOWN, make_node("a").gpus(gpus), make_node("b").gpus(gpus),
         make_job(1)),
    ]  # fmt: skip


def plans(snapshot: Snapshot, profile: Profile) -> Plan:
    """The accelerated Plan, checked equal to the generic path's."""
    plan = run_cycle(snapshot, profile)
    assert plan == run_cycle(snapshot, profile, index=False)
    return plan


@pytest.mark.parametrize(("name", "profile", "a", "b", "job"), cases(1), ids=lambda c: c)
def test_a_job_only_node_a_admits_never_preempts_on_node_b(
    name: str, profile: Profile, a: NodeBuilder, b: NodeBuilder, job: JobBuilder
) -> None:
    """Both nodes are full; b's victim is the cheaper one (lower priority, younger), so a
    victim search that did not ask the filters would stop it, for nothing."""
    running = [
        make_running(10).on("a", 0).priority(1).started(0),
        make_running(11).on("b", 0).priority(0).started(50),
    ]
    snapshot = make_snapshot([a, b], [job.gpus(1).priority(10)], now=100, running=running)
    plan = plans(snapshot, profile)
    assert [(p.victim_id, p.preemptor_id) for p in plan.preemptions] == [(10, 1)], name
    assert plan.pending[1][0].message == "preempting job 10 (priority 1) on node a"


@pytest.mark.parametrize(("name", "profile", "a", "b", "job"), cases(2), ids=lambda c: c)
def test_the_easy_reservation_never_lands_on_a_node_the_filters_reject(
    name: str, profile: Profile, a: NodeBuilder, b: NodeBuilder, job: JobBuilder
) -> None:
    """Job 1 (2 GPUs) waits: b would free a GPU first (t=200), a only at t=1000. Reserved on
    b, it would hold b's free GPU and block job 2 "reserved for job 1" for nothing."""
    running = [
        make_running(10).on("a", 0, 1).max_runtime(1000).started(0),
        make_running(11).on("b", 0).max_runtime(200).started(0),
    ]
    jobs = [job.gpus(2).cannot_preempt(), make_job(2).submitted(1).tolerate("dedicated")]
    snapshot = make_snapshot([a, b], jobs, now=100, running=running)
    plan = plans(snapshot, profile)
    assert [(r.job_id, r.node, r.start) for r in plan.reservations] == [(1, "a", 1000)], name
    if name != "unknown filter":  # job 2 may use b, which the extra filter keeps from all
        assert_placed(plan, 2, node="b")


@pytest.mark.parametrize(("name", "profile", "a", "b", "job"), cases(4), ids=lambda c: c)
def test_elastic_jobs_give_back_gpus_only_where_the_filters_admit_the_job(
    name: str, profile: Profile, a: NodeBuilder, b: NodeBuilder, job: JobBuilder
) -> None:
    """An ``elastic: restart`` job on b holds 4 GPUs above its minimum of 2; a is full with a
    job that cannot be preempted. Restarting the elastic job frees GPUs job 1 cannot use."""
    running = [
        make_running(10).on("a", 0, 1, 2, 3).not_preemptible(),
        make_running(11).on("b", 0, 1, 2, 3).elastic(2, 4),
    ]
    snapshot = make_snapshot([a, b], [job.gpus(2)], now=100, running=running)
    assert plans(snapshot, profile).preemptions == [], name
    anywhere = make_job(1).gpus(2).tolerate("dedicated")  # a job b admits takes them back
    free_on_b = make_snapshot([a, b], [anywhere], now=100, running=running)
    if name != "unknown filter":
        assert [p.victim_id for p in plans(free_on_b, profile).preemptions] == [11]


@pytest.mark.parametrize(("name", "profile", "a", "b", "job"), cases(1), ids=lambda c: c)
def test_a_job_no_node_admits_is_refused_at_submit_with_the_filters_reason(
    name: str, profile: Profile, a: NodeBuilder, b: NodeBuilder, job: JobBuilder
) -> None:
    only_b = [b.build()]
    refusal = never_fits(job.build(), only_b, profile)
    if name == "unknown filter":  # "not now" on b: it may be uncordoned, so no refusal
        assert refusal is None
        return
    assert refusal is not None
    assert (
        refusal.message
        == {
            "gpu model": "no GPU of model H100 on any node (have: A100-80GB)",
            "node selector": "no node matches node selector zone=eu",
            "taint": "1 node has taints it does not tolerate (b: dedicated=infra:NoSchedule)",
        }[name]
    )
    assert never_fits(job.build(), [a.build(), b.build()], profile) is None
