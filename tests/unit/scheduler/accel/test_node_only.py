"""Node-only verdicts kept from cycle to cycle are each filter's own ``check`` on the views.

``NodeOnlyVerdicts`` checks again only the nodes whose traits (``same_traits``) are not
those the last cycle's verdicts were found on, and drops the nodes that left. Over a sequence of
snapshots that keep some views, change, add and drop others (``test_reuse.sequences``),
every filter's rejections for every job of the sequence must be what ``check`` says of
each node now.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings

from gpudock.config import SchedulerConfig
from gpudock.core.affinity import Taint
from gpudock.scheduler.accel.declared import FilterPlan
from gpudock.scheduler.accel.node_only import NodeOnlyMemo, NodeOnlyVerdicts
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.declarations import GpuTraits, NodeOnly, NodeTraits, same_traits
from gpudock.scheduler.framework import Status
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import JobRequest, Snapshot

from ..builders import make_job, make_node
from ..test_reuse import sequences
from .test_indexed import configs


def checked(declared: NodeOnly, job: JobRequest, state: CycleState) -> dict[str, Status]:
    """The reference: ``check`` on every node's view, the rejections."""
    out = {}
    for name, view in state.views.items():
        status = declared.check(job, view)
        if not status.ok:
            out[name] = status
    return out


@settings(max_examples=80, deadline=None)
@given(sequences(), configs)
def test_kept_verdicts_are_the_filters_own_on_every_cycle(
    sequence: list[Snapshot], config: SchedulerConfig
) -> None:
    node_only = [(i, d) for i, _, d in FilterPlan(build_profile(config)).all.node_only]
    jobs = [job for snapshot in sequence for job in snapshot.pending]
    memo = NodeOnlyMemo()
    for snapshot in [s for drawn in sequence for s in (drawn, drawn)]:
        state = CycleState(snapshot.nodes)
        verdicts = NodeOnlyVerdicts(state, memo)
        for job in jobs:
            union: set[str] = set()
            for position, declared in node_only:
                expected = checked(declared, job, state)
                assert verdicts.rejected(position, declared, job) == expected
                union |= expected.keys()
            assert set(verdicts.rejecting(node_only, job)) == union


def test_a_node_whose_view_changed_is_checked_again_and_one_that_left_is_dropped() -> None:
    plan = FilterPlan(build_profile(SchedulerConfig()))
    [(position, declared)] = [(i, d) for i, p, d in plan.all.node_only if p.name == "gpu_model"]
    h100 = make_node("a").gpus(2, model="H100").build()
    a100 = make_node("b").gpus(2, model="A100").build()
    gone = make_node("c").gpus(2, model="A100").build()
    job = make_job(1).gpus(1).model("H100").build()
    memo = NodeOnlyMemo()
    first = NodeOnlyVerdicts(CycleState([h100, a100, gone]), memo)
    assert set(first.rejected(position, declared, job)) == {"b", "c"}
    again = NodeOnlyVerdicts(CycleState([h100, a100, gone]), memo)
    assert again.rejected(position, declared, job) is first.rejected(position, declared, job)
    b_now_h100 = make_node("b").gpus(2, model="H100").build()
    later = NodeOnlyVerdicts(CycleState([h100, b_now_h100]), memo)
    assert later.rejected(position, declared, job) == {}


def test_a_node_whose_view_changed_only_in_use_keeps_its_verdicts() -> None:
    plan = FilterPlan(build_profile(SchedulerConfig()))
    [(position, declared)] = [(i, d) for i, p, d in plan.all.node_only if p.name == "gpu_model"]
    idle = make_node("b").gpus(2, model="A100").build()
    busy = make_node("b").gpus(2, model="A100").shared(0, "10GiB").build()
    job = make_job(1).gpus(1).model("H100").build()
    memo = NodeOnlyMemo()
    first = NodeOnlyVerdicts(CycleState([idle]), memo).rejected(position, declared, job)
    later = NodeOnlyVerdicts(CycleState([busy]), memo).rejected(position, declared, job)
    assert set(later) == {"b"}
    assert later is first  # not checked again: a share placed there is no trait


NODE_TRAITS: dict[str, Any] = {  # each trait a node-only filter may read, and another value of it
    "name": "other",
    "available": False,
    "unavailable_reason": "heartbeat lost",
    "labels": (("zone", "b"),),
    "taints": (Taint("gpu", "old"),),
    "cpus": 64.0,
    "host_memory": 1 << 40,
    "gpu_sharing": "mps",
    "cuda_version": "11.8",
    "driver_version": "520.61",
    "out_of_service": ((0, "quarantined: XID 48"),),
}
GPU_TRAITS: dict[str, Any] = {
    "uuid": "GPU-other",
    "index": 7,
    "name": "H100",
    "memory_total": 1,
    "healthy": False,
}


def _properties(protocol: type) -> set[str]:
    return {name for name, value in vars(protocol).items() if isinstance(value, property)}


def test_same_traits_tells_apart_every_trait_and_no_use() -> None:
    assert NODE_TRAITS.keys() == _properties(NodeTraits) - {"gpus"}  # every trait is tried
    assert GPU_TRAITS.keys() == _properties(GpuTraits)
    node = make_node("a").gpus(2, model="A100").build()
    for trait, value in NODE_TRAITS.items():
        assert not same_traits(node, replace(node, **{trait: value})), trait
    for trait, value in GPU_TRAITS.items():
        gpus = (replace(node.gpus[0], **{trait: value}), node.gpus[1])
        assert not same_traits(node, replace(node, gpus=gpus)), trait
    assert not same_traits(node, replace(node, gpus=node.gpus[:1]))
    in_use = make_node("a").gpus(2, model="A100").shared(0, "10GiB").build()
    in_use = replace(in_use, used_cpus=3.0, used_host_memory=1 << 30)
    assert in_use != node
    assert same_traits(node, in_use)
