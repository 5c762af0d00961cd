"""``memory_capacity``: jobs take host memory on nodes that count it, as they take CPUs.

The filter is one module and one registry line; the cycle, the capacity
index and ``CycleState.reserve`` need nothing else (the property at the end
holds the accelerated plan to the generic one with memory in play).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.config import SchedulerConfig
from gpudock.scheduler.capacity import NodeState
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.framework import StatusCode
from gpudock.scheduler.policies.memory_capacity import MemoryCapacity
from gpudock.scheduler.registry import DEFAULT_FILTERS, build_profile
from gpudock.scheduler.snapshot import Snapshot

from .accel.test_indexed import configs, snapshots
from .builders import (
    GiB,
    NodeBuilder,
    assert_pending,
    assert_placed,
    make_job,
    make_node,
    make_snapshot,
    run,
)


def state(node: NodeBuilder) -> NodeState:
    return NodeState.from_view(node.build())


def test_memory_capacity_is_a_default_filter_after_cpus() -> None:
    assert DEFAULT_FILTERS.index("memory_capacity") == DEFAULT_FILTERS.index("cpu_capacity") + 1


def test_a_flood_of_cpu_only_jobs_takes_only_the_memory_there_is() -> None:
    node = make_node("n0").memory("8GiB", used="2GiB")
    jobs = [make_job(i).gpus(0).memory("2GiB") for i in range(1, 6)]
    plan = run(make_snapshot([node], jobs))
    for placed in (1, 2, 3):
        assert_placed(plan, placed, node="n0")
    for waiting in (4, 5):
        assert_pending(
            plan,
            waiting,
            layer="devices",
            exact="needs 2GiB memory; the most free on one node is 0B (n0)",
        )


def test_memory_held_in_the_cycle_is_not_given_twice_to_gpu_jobs() -> None:
    node = make_node("n0").gpus(4).memory("10GiB")
    plan = run(make_snapshot([node], [make_job(1).memory("6GiB"), make_job(2).memory("6GiB")]))
    assert_placed(plan, 1, node="n0")
    assert_pending(plan, 2, contains="needs 6GiB memory; the most free on one node is 4GiB (n0)")


def test_jobs_without_memory_and_nodes_without_memory_are_not_counted() -> None:
    full = make_node("full").gpus(1).memory("4GiB", used="4GiB")
    assert_placed(run(make_snapshot([full], [make_job(1)])), 1, node="full")
    uncounted = make_node("free").gpus(1)
    assert_placed(run(make_snapshot([uncounted], [make_job(2).memory("1TiB")])), 2, node="free")


def test_the_job_goes_where_the_memory_is() -> None:
    nodes = [make_node("a").gpus(2).memory("16GiB", used="12GiB"), make_node("b").gpus(2)]
    nodes[1].memory("64GiB")
    assert_placed(run(make_snapshot(nodes, [make_job(1).memory("8GiB")])), 1, node="b")


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(st.none(), st.integers(0, 64)),
    st.one_of(st.none(), st.integers(0, 64)),
    st.integers(0, 80),
)
def test_it_skips_exactly_the_jobs_every_node_admits(
    asked: int | None, total: int | None, used: int
) -> None:
    job = replace(make_job(1).gpus(0).build(), memory=None if asked is None else asked * GiB)
    node = make_node("n0")
    if total is not None:
        node.memory(f"{total}GiB", used=f"{used}GiB")
    policy = MemoryCapacity()
    assert policy.skips(job) == (not asked)
    if policy.skips(job):  # the promise: it admits this job on every node, in every state
        assert policy.filter(job, state(node)).ok


def test_too_little_memory_in_all_is_never_and_busy_is_not_now() -> None:
    policy, job = MemoryCapacity(), make_job(1).gpus(0).memory("32GiB").build()
    small = policy.filter(job, state(make_node("small").memory("16GiB")))
    busy = policy.filter(job, state(make_node("busy").memory("64GiB", used="40GiB")))
    fits = policy.filter(job, state(make_node("ok").memory("64GiB", used="32GiB")))
    assert (small.code, small.reason) == (StatusCode.UNRESOLVABLE, "node small has 16GiB memory")
    assert (busy.code, busy.reason) == (StatusCode.UNSCHEDULABLE, "node busy has 24GiB memory free")
    assert fits.ok


def test_a_job_larger_than_every_node_says_what_node_it_needs() -> None:
    nodes = [make_node("a").gpus(1).memory("16GiB"), make_node("b").gpus(1).memory("32GiB")]
    plan = run(make_snapshot(nodes, [make_job(1).memory("64GiB")]))
    (reason,) = [r for r in assert_pending(plan, 1) if "memory" in r.message]
    assert reason.layer == "devices"
    assert reason.message == "needs 64GiB memory; the largest node has 32GiB (b)"
    assert reason.counterfactual == "needs a node with at least 64GiB memory"


def test_a_node_rejected_for_something_else_leaves_the_wait_to_that_reason() -> None:
    nodes = [make_node("a").gpus(1).memory("4GiB"), make_node("b").gpus(1).exclusive(0)]
    nodes[1].memory("64GiB")
    plan = run(make_snapshot(nodes, [make_job(1).memory("8GiB")]))
    reasons = assert_pending(plan, 1)
    assert not any("memory" in r.message for r in reasons)


@st.composite
def with_memory(draw: st.DrawFn, base: Snapshot) -> Snapshot:
    """``base`` with random host memory on some nodes and random requests on some jobs."""
    nodes = tuple(
        replace(
            view,
            host_memory=draw(st.sampled_from([None, 8 * GiB, 32 * GiB])),
            used_host_memory=draw(st.sampled_from([0, 4 * GiB])),
        )
        for view in base.nodes
    )
    pending = tuple(
        replace(job, memory=draw(st.sampled_from([None, 2 * GiB, 6 * GiB, 40 * GiB])))
        for job in base.pending
    )
    return replace(base, nodes=nodes, pending=pending)


@settings(max_examples=150, deadline=None)
@given(st.data(), configs)
def test_the_capacity_index_gives_the_generic_plan_with_memory(
    data: st.DataObject, config: SchedulerConfig
) -> None:
    snapshot = data.draw(with_memory(data.draw(snapshots())))
    profile = build_profile(config)
    plan = run_cycle(snapshot, profile)
    assert plan == run_cycle(snapshot, profile, index=False)
    placed = {p.job_id: p.node for p in plan.placements}
    memory = {j.id: j.memory or 0 for j in snapshot.pending}
    for view in snapshot.nodes:
        if view.host_memory is not None:
            taken = sum(memory[j] for j, node in placed.items() if node == view.name)
            assert view.used_host_memory + taken <= max(view.host_memory, view.used_host_memory)
