"""GPUs out of service take no placement, and the pending reason says which and why."""

from __future__ import annotations

from dataclasses import replace

from gpudock.scheduler.snapshot import NodeView

from .builders import assert_pending, assert_placed, make_job, make_node, make_snapshot, run

XID = "quarantined: XID 48 (double bit ECC error); needs a GPU reset"


def node(name: str, gpus: int, out: dict[int, str]) -> NodeView:
    view = make_node(name).gpus(gpus).unhealthy(*out).build()
    return replace(view, out_of_service=tuple(sorted(out.items())))


def test_a_job_waits_for_a_gpu_out_of_service_with_its_reason() -> None:
    plan = run(make_snapshot([node("gpu-0", 2, {1: XID})], [make_job(1).gpus(2)]))
    assert_pending(
        plan, 1, layer="health", exact=f"node gpu-0 has 1 GPU out of service: GPU 1 {XID}"
    )


def test_gpus_in_service_still_take_jobs() -> None:
    nodes = [node("a", 2, {0: "cordoned: cordoned by admin"}), node("b", 1, {})]
    plan = run(make_snapshot(nodes, [make_job(1).gpus(1), make_job(2).gpus(1)]))
    assert_placed(plan, 1, node="a", gpus=[1])
    assert_placed(plan, 2, node="b")


def test_the_job_goes_where_enough_gpus_are_in_service() -> None:
    nodes = [node("a", 2, {0: "cordoned: cordoned by admin"}), node("b", 2, {})]
    plan = run(make_snapshot(nodes, [make_job(1).gpus(2)]))
    assert_placed(plan, 1, node="b")


def test_too_few_gpus_even_in_service_is_capacitys_to_say() -> None:
    plan = run(make_snapshot([node("a", 2, {1: XID})], [make_job(1).gpus(4)]))
    assert_pending(plan, 1, layer="devices")
