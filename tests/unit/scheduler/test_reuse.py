"""What a session keeps from one cycle for the next never changes a Plan.

With a ``SchedulerSession``, ``CycleState.fit`` remembers the last cycle's
summaries of snapshot GPU tuples, and ``Catalog`` the last cycle's
per-product capacity indexes, brought up to date by the next cycle. A
sequence of snapshots that reuse some node views (as the simulator does),
change others, add, drop or take nodes down, must get the Plans that
session-less cycles (which keep nothing) get.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.config import SchedulerConfig
from gpudock.scheduler.accel.index import PRICED
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.framework import Profile
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import NodeView, Snapshot

from .accel.test_indexed import configs, snapshots
from .builders import GiB


def assert_same_plans_as_keeping_nothing(
    sequence: list[Snapshot], profile: Profile, repeat: bool
) -> None:
    """Cycles run in turn on ``sequence`` with one session get the Plans of cycles that
    keep nothing; ``repeat``: each snapshot twice in a row, so that everything is found
    again."""
    expected = [run_cycle(snapshot, profile) for snapshot in sequence]
    if repeat:
        sequence = [s for snapshot in sequence for s in (snapshot, snapshot)]
        expected = [p for plan in expected for p in (plan, plan)]
    session = SchedulerSession()
    assert [run_cycle(snapshot, profile, session=session) for snapshot in sequence] == expected


@st.composite
def sequences(draw: st.DrawFn) -> list[Snapshot]:
    """Snapshots whose nodes come, name by name, from the previous one (the same view, or
    the same node with jobs started or ended) or from a fresh draw, or are left out."""
    first = draw(snapshots())
    out = [first]
    for _ in range(draw(st.integers(1, 3))):
        other = draw(snapshots())
        previous = {v.name: v for v in out[-1].nodes}
        fresh = {v.name: v for v in other.nodes}
        nodes = []
        sources = draw(st.sampled_from([["same", "used"], ["same", "used", "fresh", "none"]]))
        for name in sorted(previous.keys() | fresh.keys()):
            source = draw(st.sampled_from(sources))
            if source == "same" and name in previous:
                nodes.append(previous[name])
            elif source == "used" and name in previous:
                nodes.append(used(previous[name], draw))
            elif source != "none" and name in fresh:
                nodes.append(fresh[name])
        out.append(replace(other, nodes=tuple(nodes)))
    return out


def used(view: NodeView, draw: st.DrawFn) -> NodeView:
    """The node once some jobs have started or ended on it: same GPUs, models and health."""
    gpus = list(view.gpus)
    for i in draw(st.lists(st.integers(0, max(0, len(gpus) - 1)), max_size=3)):
        if i < len(gpus):
            share = draw(st.sampled_from([None, 10 * GiB, 20 * GiB]))
            gpus[i] = gpus[i].with_job(share, draw(st.sampled_from([1, 1, -1])))
    return replace(view, gpus=tuple(gpus))


@settings(max_examples=300, deadline=None)
@given(sequences(), configs, st.booleans())
def test_a_sequence_of_cycles_gets_the_plans_of_cycles_that_keep_nothing(
    sequence: list[Snapshot], config: SchedulerConfig, repeat: bool
) -> None:
    assert_same_plans_as_keeping_nothing(sequence, build_profile(config), repeat)


def test_repeated_cycles_on_one_snapshot_reuse_the_indexes_and_agree() -> None:
    from gpudock.scheduler.accel.indexed import IndexMemo

    from .builders import make_job, make_node, make_snapshot

    nodes = [make_node(f"n{i}").gpus(8, model="H100" if i % 3 else "A100-80GB") for i in range(9)]
    jobs = [make_job(j).gpus(1 + j % 3) for j in range(1, 20)]
    jobs += [make_job(40 + j).gpu_memory("20GiB") for j in range(6)]
    jobs += [make_job(60 + j).gpu_memory("10GiB").gpus(2) for j in range(3)]
    snapshot = make_snapshot(nodes, jobs)
    profile = build_profile(SchedulerConfig())
    expected = run_cycle(snapshot, profile)
    session = SchedulerSession()
    first = run_cycle(snapshot, profile, session=session)
    memo = session.accelerator.get(IndexMemo).catalogs[1]  # binpack: fewest left first
    kept = dict(memo.indexes)
    assert kept, "the products' indexes are kept for the next cycle"
    # one-GPU shares read the priced structure (the default prices them), two-GPU ones
    # the shared buckets for two GPUs
    assert all(index.shapes == {PRICED, 2} for index in kept.values())
    assert run_cycle(snapshot, profile, session=session) == first == expected
    assert all(memo.indexes[key] is index for key, index in kept.items())
