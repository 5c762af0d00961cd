"""Step 4: every pending job says why, precisely, in words a user understands."""

from __future__ import annotations

from gpudock.scheduler.capacity import NodeState
from gpudock.scheduler.framework import StatusCode
from gpudock.scheduler.policies.gpu_capacity import GpuCapacity

from .builders import assert_pending, make_job, make_node, make_snapshot, run


def test_one_node_with_too_few_free_gpus() -> None:
    plan = run(make_snapshot([make_node("gpu-0").gpus(4).exclusive(0, 1)], [make_job(1).gpus(4)]))
    reasons = assert_pending(plan, 1, layer="devices", exact="needs 4 GPUs; node gpu-0 has 2 free")
    assert reasons[0].counterfactual == "runs when 2 more GPUs free up on gpu-0"
    assert len(reasons) == 1


def test_several_nodes_name_the_one_with_most_free() -> None:
    nodes = [
        make_node("gpu-0").gpus(4).exclusive(0, 1, 2),
        make_node("gpu-1").gpus(4).exclusive(0, 1),
        make_node("gpu-2").gpus(4).exclusive(0, 1),
    ]
    plan = run(make_snapshot(nodes, [make_job(1).gpus(4)]))
    assert_pending(
        plan, 1, exact="needs 4 GPUs; 5 GPUs free in total, but at most 2 on one node (gpu-1)"
    )


def test_nodes_too_small_to_ever_fit_are_left_out_of_the_comparison() -> None:
    nodes = [make_node("big").gpus(8).exclusive(*range(7)), make_node("small").gpus(2)]
    plan = run(make_snapshot(nodes, [make_job(1).gpus(4)]))
    assert_pending(plan, 1, exact="needs 4 GPUs; node big has 1 free")


def test_no_node_large_enough() -> None:
    nodes = [make_node("gpu-0").gpus(8), make_node("gpu-1").gpus(4)]
    reasons = assert_pending(
        run(make_snapshot(nodes, [make_job(1).gpus(16)])),
        1,
        exact="needs 16 GPUs; the largest node has 8 (gpu-0)",
    )
    assert reasons[0].counterfactual == "needs a node with at least 16 GPUs"


def test_shared_job_without_a_gpu_with_enough_free_memory() -> None:
    node = make_node("gpu-0").gpus(2, memory="40GiB").shared(0, "32GiB").shared(1, "35GiB")
    plan = run(make_snapshot([node], [make_job(1).gpu_memory("20GiB")]))
    assert_pending(
        plan,
        1,
        layer="devices",
        exact="needs 20GiB on 1 GPU; the most free on one GPU is 8GiB (node gpu-0)",
    )


def test_shared_job_needing_more_gpus_than_fit_on_one_node() -> None:
    nodes = [
        make_node("gpu-0").gpus(3).shared(0, "70GiB").exclusive(1),
        make_node("gpu-1").gpus(3).exclusive(0),
        make_node("gpu-2").gpus(2),  # can never hold 3 shares: left out
    ]
    plan = run(make_snapshot(nodes, [make_job(1).gpus(3).gpu_memory("20GiB")]))
    assert_pending(
        plan,
        1,
        exact="needs 20GiB on 3 GPUs; 3 GPUs have 20GiB free in total, "
        "but at most 2 on one node (gpu-1)",
    )
    plan = run(make_snapshot(nodes[1:], [make_job(1).gpus(3).gpu_memory("20GiB")]))
    reasons = assert_pending(
        plan, 1, exact="needs 20GiB on 3 GPUs; node gpu-1 has 2 GPUs with 20GiB free"
    )
    assert reasons[0].counterfactual == "runs when 1 more GPU on gpu-1 has 20GiB free"


def test_shared_job_ignores_exclusive_gpus_in_the_most_free() -> None:
    node = make_node("gpu-0").gpus(2).exclusive(0).shared(1, "75GiB")
    plan = run(make_snapshot([node], [make_job(1).gpu_memory("10GiB")]))
    assert_pending(plan, 1, contains="the most free on one GPU is 5GiB (node gpu-0)")


def test_shared_job_larger_than_any_gpu() -> None:
    plan = run(make_snapshot([make_node("gpu-0").gpus(2)], [make_job(1).gpu_memory("100GiB")]))
    assert_pending(plan, 1, exact="needs 100GiB on 1 GPU; the largest GPU has 80GiB (node gpu-0)")


def test_no_gpu_of_the_model_anywhere_lists_what_there_is() -> None:
    nodes = [make_node("gpu-0").gpus(2, model="T4"), make_node("gpu-1").gpus(1, model="A100-40GB")]
    reasons = assert_pending(
        run(make_snapshot(nodes, [make_job(1).model("H100")])),
        1,
        layer="constraints",
        exact="no GPU of model H100 on any node (have: A100-40GB, T4)",
    )
    assert len(reasons) == 1


def test_the_model_constraint_counts_only_gpus_of_the_model() -> None:
    nodes = [
        make_node("gpu-0").gpus(8, model="A100-40GB"),
        make_node("gpu-1").gpus(4, model="H100").exclusive(0, 1),
    ]
    reasons = assert_pending(
        run(make_snapshot(nodes, [make_job(1).gpus(4).model("H100")])),
        1,
        exact="needs 4 H100 GPUs; node gpu-1 has 2 free",
    )
    assert len(reasons) == 1  # gpu-0 is irrelevant: it has no H100


def test_an_unavailable_node() -> None:
    nodes = [make_node("gpu-0").gpus(8).unavailable("Docker daemon unreachable")]
    reasons = assert_pending(
        run(make_snapshot(nodes, [make_job(1)])),
        1,
        layer="health",
        exact="node gpu-0 unavailable: Docker daemon unreachable",
    )
    assert reasons[0].counterfactual == "may run when gpu-0 is available again"


def test_several_unavailable_nodes_are_listed_with_a_cap() -> None:
    nodes = [make_node(f"gpu-{i}").gpus(1).unavailable("heartbeat lost") for i in range(5)]
    assert_pending(
        run(make_snapshot(nodes, [make_job(1)])),
        1,
        exact="5 nodes unavailable: gpu-0 (heartbeat lost), gpu-1 (heartbeat lost), "
        "gpu-2 (heartbeat lost), and 2 more",
    )


def test_an_unavailable_node_without_a_reason() -> None:
    plan = run(make_snapshot([make_node("gpu-0").gpus(1).unavailable()], [make_job(1)]))
    assert_pending(plan, 1, exact="node gpu-0 unavailable")


def test_reasons_from_several_layers_are_all_given() -> None:
    nodes = [
        make_node("gpu-0").gpus(8).unavailable("Docker daemon unreachable"),
        make_node("gpu-1").gpus(4).exclusive(0, 1, 2),
    ]
    reasons = assert_pending(run(make_snapshot(nodes, [make_job(1).gpus(2)])), 1)
    assert [(r.layer, r.message) for r in reasons] == [
        ("health", "node gpu-0 unavailable: Docker daemon unreachable"),
        ("devices", "needs 2 GPUs; node gpu-1 has 1 free"),
    ]


def test_an_empty_cluster() -> None:
    assert_pending(run(make_snapshot([], [make_job(1)])), 1, exact="no nodes are registered")


def test_a_node_without_gpus() -> None:
    plan = run(make_snapshot([make_node("cpu-0")], [make_job(1).gpus(2)]))
    assert_pending(plan, 1, exact="needs 2 GPUs; node cpu-0 has none")


def test_unhealthy_gpus_do_not_count_as_free() -> None:
    plan = run(make_snapshot([make_node("gpu-0").gpus(2).unhealthy(1)], [make_job(1).gpus(2)]))
    assert_pending(plan, 1, exact="needs 2 GPUs; node gpu-0 has 1 free")


def test_a_node_too_small_for_the_job() -> None:
    plan = run(make_snapshot([make_node("gpu-0").gpus(2)], [make_job(1).gpus(4)]))
    assert_pending(plan, 1, exact="needs 4 GPUs; node gpu-0 has only 2")


def test_filter_statuses_say_what_the_node_lacks() -> None:
    node = NodeState.from_view(make_node("gpu-0").gpus(2, model="H100").exclusive(0).build())
    status = GpuCapacity().filter(make_job(1).gpus(2).model("H100").build(), node)
    assert (status.code, status.reason) == (
        StatusCode.UNSCHEDULABLE,
        "node gpu-0 has 1 free H100 GPUs",
    )
    status = GpuCapacity().filter(make_job(1).gpus(3).gpu_memory("8GiB").build(), node)
    assert (status.code, status.layer) == (StatusCode.UNRESOLVABLE, "devices")
    assert status.reason == "node gpu-0 has 2 GPUs of at least 8GiB"
