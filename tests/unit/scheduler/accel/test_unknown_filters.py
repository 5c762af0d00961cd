"""A filter the capacity index does not know keeps the fast path and its Plan.

The index answers the built-in filters from its buckets and runs every other
filter of the profile on the candidates it returns, in profile order
(``indexed.ExtraFilters``); step 4 words the reasons as the generic path
does. These tests compare that answer with the generic path's
(``run_cycle(..., index=False)``) on the random clusters of ``test_indexed``,
with a random extra filter: one that rejects nodes by a hash of their name,
one that rejects nodes by their idle GPUs (not monotone in capacity: a
reservation may turn a rejected node into an admitted one), at a random place
in the profile, rejecting as "not now" or "never", and admitting every node
for the jobs of one GPU count, which it says it ``skips``.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.config import SchedulerConfig
from gpudock.core.job import PendingReason
from gpudock.scheduler.accel.declared import FilterPlan, usable
from gpudock.scheduler.capacity import NodeState
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.framework import SUCCESS, FilterPolicy, Profile, Rejection, Status
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import JobRequest, Snapshot

from ..builders import assert_pending, assert_placed, make_job, make_node, make_snapshot
from .test_indexed import configs, cpu_snapshots, snapshots, stranding_snapshots


@dataclass(frozen=True)
class HashFilter:
    """Rejects a node when a hash of its name (and ``salt``) falls under ``share`` of 8;
    with ``by_idle``, when the node's idle GPU count is odd instead. Admits every node for
    a job of ``spares`` GPUs, and says so (``skips``)."""

    salt: int
    share: int
    never: bool
    by_idle: bool = False
    spares: int = -1
    name: str = "hashed"
    layer: str = "health"

    def skips(self, job: JobRequest) -> bool:
        return job.gpus == self.spares

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if job.gpus == self.spares:
            return SUCCESS
        if self.by_idle:
            rejected = node.idle_gpus % 2 == 1
        else:
            rejected = zlib.crc32(f"{self.salt}:{node.name}".encode()) % 8 < self.share
        if not rejected:
            return SUCCESS
        if self.never:
            return Status.unresolvable(self.layer, f"node {node.name} is hashed out")
        return Status.unschedulable(self.layer, f"node {node.name} is busy by hash")

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        if len(rejections) % 2 == 0:
            return None  # now and then the others' reasons (or the fallback) must carry it
        names = ", ".join(r.node.name for r in rejections)
        return PendingReason(self.layer, f"{len(rejections)} of {total_nodes} hashed: {names}")


@st.composite
def extra_filters(draw: st.DrawFn) -> tuple[HashFilter, int]:
    """A ``HashFilter`` and where it goes among the six built-in filters."""
    extra = HashFilter(
        salt=draw(st.integers(0, 1000)),
        share=draw(st.integers(0, 8)),
        never=draw(st.booleans()),
        by_idle=draw(st.sampled_from([False, False, True])),
        spares=draw(st.sampled_from([-1, -1, 1, 2])),
    )
    return extra, draw(st.integers(0, 7))  # 7: after every declared filter


def with_extra(config: SchedulerConfig, extra: tuple[FilterPolicy, int]) -> Profile:
    profile = build_profile(config)
    policy, at = extra
    filters = (*profile.filters[:at], policy, *profile.filters[at:])
    extended = replace(profile, filters=filters)
    assert usable(extended)  # the accelerated path, unknown filter and all
    return extended


def assert_same_plans(snapshot: Snapshot, profile: Profile) -> None:
    assert run_cycle(snapshot, profile) == run_cycle(snapshot, profile, index=False)


@settings(max_examples=300, deadline=None)
@given(snapshots(), configs, extra_filters())
def test_an_unknown_filter_gives_the_generic_plan(
    snapshot: Snapshot, config: SchedulerConfig, extra: tuple[HashFilter, int]
) -> None:
    assert_same_plans(snapshot, with_extra(config, extra))


@settings(max_examples=200, deadline=None)
@given(cpu_snapshots(), configs, extra_filters())
def test_an_unknown_filter_gives_the_generic_plan_for_jobs_asking_for_cpus(
    snapshot: Snapshot, config: SchedulerConfig, extra: tuple[HashFilter, int]
) -> None:
    assert_same_plans(snapshot, with_extra(config, extra))


@settings(max_examples=200, deadline=None)
@given(stranding_snapshots(), configs, extra_filters())
def test_an_unknown_filter_gives_the_generic_plan_where_shares_strand_gpus(
    snapshot: Snapshot, config: SchedulerConfig, extra: tuple[HashFilter, int]
) -> None:
    assert_same_plans(snapshot, with_extra(config, extra))


def test_an_unknown_filter_words_its_rejections_and_the_next_best_node_is_taken() -> None:
    extra = HashFilter(salt=0, share=8, never=False)  # rejects every node
    nodes = [make_node(f"n{i}").gpus(8).exclusive(*range(2 + i)) for i in range(3)]
    profile = with_extra(SchedulerConfig(), (extra, 3))
    snapshot = make_snapshot(nodes, [make_job(1).gpus(2)])
    plan = run_cycle(snapshot, profile)
    assert_pending(plan, 1, layer="health", exact="3 of 3 hashed: n0, n1, n2")
    assert plan == run_cycle(snapshot, profile, index=False)
    by_idle = HashFilter(salt=0, share=0, never=True, by_idle=True)  # rejects odd idle counts
    nodes = [
        make_node("n0").gpus(8).exclusive(*range(5)),
        make_node("n1").gpus(8).exclusive(*range(4)),
    ]
    profile = with_extra(SchedulerConfig(), (by_idle, 0))
    snapshot = make_snapshot(nodes, [make_job(1).gpus(2)])
    plan = run_cycle(snapshot, profile)
    assert_placed(plan, 1, node="n1")  # binpack prefers n0 (3 idle), which is rejected
    assert plan == run_cycle(snapshot, profile, index=False)


def test_a_job_an_unknown_filter_vetoed_and_that_fits_at_the_end_gets_the_generic_reason() -> None:
    """Job 1 (shares on 2 GPUs) is vetoed while n00 has 3 idle GPUs (odd); job 2 (1 GPU,
    which the filter skips) then leaves 2 idle, so at step 4 every filter admits n00 for
    job 1: no declared wording applies. No reservation is made for job 1 on n00 either:
    the filter rejects it there, now and with nothing running."""
    by_idle = HashFilter(salt=0, share=0, never=False, by_idle=True, spares=1)
    snapshot = make_snapshot(
        [make_node("n00").gpus(4).exclusive(0)],
        [make_job(1).gpus(2).gpu_memory("4GiB"), make_job(2).gpus(1)],
    )
    profile = with_extra(SchedulerConfig(), (by_idle, 0))
    plan = run_cycle(snapshot, profile)
    assert_placed(plan, 2, node="n00")
    assert_pending(plan, 1, exact="no node can take it now (1 checked)")
    assert not plan.reservations
    assert plan == run_cycle(snapshot, profile, index=False)


def test_a_vetoed_key_searches_again_where_a_reservation_changed_a_node() -> None:
    """Job 1 (2 GPUs) is vetoed on both nodes (3 and 5 idle GPUs: odd). Job 2 (1 GPU, which
    the filter skips) is pinned to n1 and leaves it 4 idle GPUs; job 3 (job 1's key) finds
    n0 first, still vetoed, and is placed on n1: a key vetoed everywhere searches again
    where a reservation changed a node."""
    by_idle = HashFilter(salt=0, share=0, never=False, by_idle=True, spares=1)
    nodes = [
        make_node("n0").gpus(8).exclusive(*range(5)),
        make_node("n1").gpus(8).exclusive(*range(3)).label("pool", "b"),
    ]
    jobs = [make_job(1).gpus(2), make_job(2).gpus(1).selector("pool", "b"), make_job(3).gpus(2)]
    snapshot = make_snapshot(nodes, jobs)
    profile = with_extra(SchedulerConfig(), (by_idle, 0))
    plan = run_cycle(snapshot, profile)
    assert_placed(plan, 2, node="n1")
    assert_placed(plan, 3, node="n1")
    assert_pending(plan, 1)
    assert plan == run_cycle(snapshot, profile, index=False)


def test_unknown_filters_after_every_declared_one_run_only_where_the_declared_admit() -> None:
    profile = build_profile(SchedulerConfig())
    extra = HashFilter(salt=1, share=4, never=False)
    job = make_job(1).gpus(2).build()
    last = replace(profile, filters=(*profile.filters, extra))
    first = replace(profile, filters=(extra, *profile.filters))
    assert FilterPlan(last).for_job(job).extras_last()
    assert FilterPlan(profile).for_job(job).extras_last()
    assert not FilterPlan(first).for_job(job).extras_last()


@dataclass(frozen=True)
class Refusing:
    """Admits every node and skips every job: the accelerated path must never run it."""

    name: str = "refusing"
    layer: str = "health"

    def skips(self, job: JobRequest) -> bool:
        return True

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        raise AssertionError(f"filter ran for job {job.id} on {node.name}")

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        raise AssertionError("explain ran")


def test_a_filter_that_skips_a_job_is_not_run_for_it_on_the_fast_path() -> None:
    nodes = [make_node("n0").gpus(8).exclusive(*range(6)), make_node("n1").gpus(4)]
    jobs = [make_job(1).gpus(2), make_job(2).gpu_memory("8GiB"), make_job(3).gpus(8)]
    plan = run_cycle(make_snapshot(nodes, jobs), with_extra(SchedulerConfig(), (Refusing(), 3)))
    assert_placed(plan, 1, node="n0")
    assert_placed(plan, 2, node="n1")
    assert_pending(plan, 3, layer="devices")
