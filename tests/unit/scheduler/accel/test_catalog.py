"""The accelerator's classes of nodes (``accel/catalog.py``): jobs whose node-only filters
give the same rejections share one class, whatever their keys; a job that a filter keeps
off a node gets a class without it."""

from __future__ import annotations

from dataclasses import replace

from gpudock.config import SchedulerConfig
from gpudock.scheduler.accel.catalog import Catalog
from gpudock.scheduler.accel.declared import FilterPlan
from gpudock.scheduler.accel.node_only import NodeOnlyVerdicts
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import NodeView

from ..builders import make_job, make_node


def catalog(nodes: list[NodeView]) -> tuple[Catalog, FilterPlan]:
    plan = FilterPlan(build_profile(SchedulerConfig()))
    state = CycleState(nodes)
    base = tuple((i, d) for i, _, d in plan.all.node_only if d.key is None)
    return Catalog(state, 1, NodeOnlyVerdicts(state), base), plan


def test_jobs_of_other_sizes_share_a_class_where_no_filter_rejects_a_node() -> None:
    nodes = [make_node(n).gpus(4, model="A100").build() for n in ("a", "b")]
    found, plan = catalog(nodes)
    one, two = make_job(1).gpus(1).build(), make_job(2).gpus(2).build()
    assert found.model_class(one, plan.for_job(one)) is found.model_class(two, plan.for_job(two))


def test_a_job_kept_off_a_node_by_a_gpu_out_of_service_gets_a_class_without_it() -> None:
    healthy = make_node("a").gpus(4, model="A100").build()
    sick = make_node("b").gpus(4, model="A100").build()
    sick = replace(
        sick,
        gpus=(replace(sick.gpus[0], healthy=False), *sick.gpus[1:]),
        out_of_service=((0, "quarantined: XID 48"),),
    )
    found, plan = catalog([healthy, sick])
    one, four = make_job(1).gpus(1).build(), make_job(2).gpus(4).build()
    small = found.model_class(one, plan.for_job(one))  # 3 GPUs in service on b: fits
    whole = found.model_class(four, plan.for_job(four))  # the health filter rejects b
    assert small is not whole
    assert {n for part in small.parts for n in part.index.fits} == {"a", "b"}
    assert {n for part in whole.parts for n in part.index.fits} == {"a"}
    rejected = [status.reason for r in whole.rejected().values() for status in r.values()]
    assert rejected == ["node b has 1 GPU out of service: GPU 0 quarantined: XID 48"]
