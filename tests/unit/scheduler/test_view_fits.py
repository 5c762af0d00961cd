"""``CycleState.fit`` reuses the summary its memo kept of an unchanged GPU tuple; same Plans.

Callers such as the simulator keep a node's ``NodeView`` while it is
unchanged, and one ``SchedulerSession`` (whose ``fits`` is a ``FitMemo``),
so a cycle finds most GPU tuples of the previous snapshot again and skips
summarising them. The Plan must not depend on it: a snapshot of reused
views and one of fresh, equal views get the same Plan.
"""

from __future__ import annotations

from dataclasses import replace

from tests.unit.scheduler.builders import make_job, make_node, make_snapshot

from gpudock.config import SchedulerConfig
from gpudock.scheduler.capacity import CycleState, FitMemo
from gpudock.scheduler.cycle import schedule
from gpudock.scheduler.node_fit import ANY_MODEL, node_fit
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import NodeView, Snapshot


def a_snapshot() -> Snapshot:
    nodes = [make_node(f"n{i}").gpus(4 + i % 5) for i in range(6)]
    jobs = [make_job(j).gpus(1 + j % 4) for j in range(1, 12)]
    jobs += [make_job(20 + j).gpu_memory("10GiB") for j in range(4)]
    return make_snapshot(nodes, jobs)


def fresh_views(snapshot: Snapshot) -> Snapshot:
    """Equal views, none of them (nor their GPU tuples) the same object."""
    nodes = tuple(replace(v, gpus=tuple(replace(g) for g in v.gpus)) for v in snapshot.nodes)
    return replace(snapshot, nodes=nodes)


def test_reused_and_fresh_views_get_the_same_plan() -> None:
    snapshot, config, session = a_snapshot(), SchedulerConfig(), SchedulerSession()
    first = schedule(snapshot, config, session=session)
    again = schedule(snapshot, config, session=session)  # every GPU tuple known
    fresh = schedule(fresh_views(snapshot), config, session=session)  # none known
    assert first == again == fresh
    assert first.placements


def test_only_the_latest_cycle_is_remembered_and_its_fits_are_node_fit() -> None:
    old, new, memo = a_snapshot(), fresh_views(a_snapshot()), FitMemo()
    state = CycleState(old.nodes, memo)
    for view in old.nodes:
        state.fit(view.name)
    state = CycleState(new.nodes, memo)
    for view in new.nodes:
        assert state.fit(view.name) == node_fit(view.gpus, ANY_MODEL)
    remembered = {id(gpus) for gpus, _ in memo.fits.values()}
    assert remembered == {id(v.gpus) for v in new.nodes}


def test_a_changed_node_is_refitted_not_taken_from_the_last_cycle() -> None:
    snapshot, memo = a_snapshot(), FitMemo()
    state = CycleState(snapshot.nodes, memo)
    before = state.fit("n0")
    job = make_job(99).gpus(2).build()
    state.reserve(job, "n0", [0, 1])
    after = CycleState(snapshot.nodes, memo).fit("n0")  # a new cycle: the snapshot's GPUs
    assert before == after == node_fit(snapshot.nodes[0].gpus, ANY_MODEL)
    assert state.fit("n0").idle == before.idle - 2


def test_fit_all_is_fit_of_every_node_in_snapshot_order() -> None:
    """Whether a node is known from the last cycle, fitted already, copied, or changed."""
    snapshot, memo = a_snapshot(), FitMemo()
    CycleState(snapshot.nodes, memo).fit_all()  # the last cycle: every GPU tuple known
    views = list(snapshot.nodes)
    views[1] = fresh_views(make_snapshot([make_node("n1").gpus(5)], [])).nodes[0]  # not known
    state, reference = CycleState(views, memo), CycleState(views)
    job = make_job(99).gpus(2).build()
    for s in (state, reference):
        s.fit("n2")  # fitted already
        s.reserve(job, "n3", [0, 1])  # changed
        s.nodes["n4"]  # copied, unchanged
    expected = [reference.fit(v.name) for v in views]
    assert state.fit_all() == expected
    assert expected[1] == node_fit(views[1].gpus, ANY_MODEL)
    assert expected[3].idle_all == len(views[3].gpus) - 2
    assert state.fit_all() == expected  # again: all memoized


def uuids_unique(views: list[NodeView]) -> bool:
    """The definition: no two GPUs of the snapshot share a uuid."""
    uuids = [g.uuid for v in views for g in v.gpus]
    return len(set(uuids)) == len(uuids)


def test_unique_uuids_is_recomputed_whenever_a_node_lists_other_uuids() -> None:
    """The last cycle's answer is kept only while every node lists the same uuids."""
    views = list(a_snapshot().nodes)
    n1 = views[1]
    clash = replace(n1, gpus=(replace(n1.gpus[0], uuid=views[0].gpus[0].uuid), *n1.gpus[1:]))
    extra = make_node("n9").gpus(2).build()
    twin = replace(extra, name="n10")  # the same uuids as n9
    sequences = [
        views,  # unique
        views,  # the same views: the answer kept
        [views[0], clash, *views[2:]],  # a clash in a changed GPU tuple
        [views[0], clash, *views[2:]],  # kept: still a clash
        list(fresh_views(a_snapshot()).nodes),  # equal uuids in new tuples: kept
        [*views, extra],  # a node added
        [*views, extra, twin],  # a node added with another's uuids
        [*views, twin],  # that node alone again: unique
        views[:3],  # nodes gone
        [],
        [replace(views[0], gpus=())],  # a node without GPUs
    ]
    memo = FitMemo()
    for nodes in sequences:
        assert CycleState(nodes, memo).unique_uuids == uuids_unique(list(nodes))


def test_a_gpu_state_copy_is_equal_and_changes_on_its_own() -> None:
    state = CycleState(a_snapshot().nodes)
    gpu = state.nodes["n0"].gpus[0]
    copied = gpu.copy()
    assert copied == gpu and copied is not gpu
    copied.used_memory, copied.exclusive = 5, True
    assert (gpu.used_memory, gpu.exclusive) == (0, False)
