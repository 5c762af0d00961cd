"""Steps 3a-3d: filters, binpack vs spread, GPU choice, shared jobs, constraints."""

from __future__ import annotations

from gpudock.scheduler.capacity import NodeState
from gpudock.scheduler.declarations import room_of
from gpudock.scheduler.policies.binpack import Binpack, stranded_gpus

from .builders import (
    assert_pending,
    assert_placed,
    gpu_indices,
    make_job,
    make_node,
    make_snapshot,
    no_data,
    run,
)

# -- binpack vs spread --------------------------------------------------------


def test_binpack_prefers_the_node_with_least_free_left() -> None:
    nodes = [make_node("n0").gpus(8), make_node("n1").gpus(8).exclusive(0, 1, 2)]
    plan = run(make_snapshot(nodes, [make_job(1)]), placement="binpack")
    assert_placed(plan, 1, node="n1", gpus=[3])


def test_spread_prefers_the_node_with_most_free_left() -> None:
    nodes = [make_node("n0").gpus(8).exclusive(0, 1, 2), make_node("n1").gpus(8)]
    plan = run(make_snapshot(nodes, [make_job(1)]), placement="spread")
    assert_placed(plan, 1, node="n1", gpus=[0])


def test_binpack_is_the_default() -> None:
    nodes = [make_node("n0").gpus(8), make_node("n1").gpus(2)]
    assert_placed(run(make_snapshot(nodes, [make_job(1)])), 1, node="n1")


def test_ties_go_to_the_lowest_node_name() -> None:
    nodes = [make_node("b").gpus(4), make_node("a").gpus(4), make_node("c").gpus(4)]
    for placement in ("binpack", "spread"):
        plan = run(make_snapshot(nodes, [make_job(1)]), placement=placement)
        assert_placed(plan, 1, node="a")


def test_binpack_fills_one_node_before_the_next() -> None:
    nodes = [make_node("n0").gpus(4), make_node("n1").gpus(4)]
    jobs = [make_job(i).submitted(i) for i in range(1, 6)]
    plan = run(make_snapshot(nodes, jobs), placement="binpack")
    assert [(p.node, gpu_indices(p)) for p in plan.placements] == [
        ("n0", [0]),
        ("n0", [1]),
        ("n0", [2]),
        ("n0", [3]),
        ("n1", [0]),
    ]


def test_spread_alternates_between_nodes() -> None:
    nodes = [make_node("n0").gpus(4), make_node("n1").gpus(4)]
    jobs = [make_job(i).submitted(i) for i in range(1, 5)]
    plan = run(make_snapshot(nodes, jobs), placement="spread")
    assert [p.node for p in plan.placements] == ["n0", "n1", "n0", "n1"]


# -- whole GPUs ---------------------------------------------------------------


def test_exclusive_jobs_take_the_lowest_index_idle_gpus() -> None:
    node = make_node("n0").gpus(4).exclusive(0, 2)
    plan = run(make_snapshot([node], [make_job(1).gpus(2)]))
    assert_placed(plan, 1, node="n0", gpus=[1, 3], memory=None)
    assert plan.placements[0].memory_per_gpu is None


def test_a_multi_gpu_job_is_never_split_across_nodes() -> None:
    nodes = [make_node("n0").gpus(2), make_node("n1").gpus(2)]
    plan = run(make_snapshot(nodes, [make_job(1).gpus(3), make_job(2).gpus(2)]))
    assert_pending(plan, 1)
    assert_placed(plan, 2, node="n0", gpus=[0, 1])


def test_unhealthy_gpus_are_never_chosen() -> None:
    plan = run(make_snapshot([make_node("n0").gpus(3).unhealthy(0, 1)], [make_job(1)]))
    assert_placed(plan, 1, gpus=[2])


def test_exclusive_jobs_never_take_a_gpu_holding_shares() -> None:
    node = make_node("n0").gpus(2).shared(0, "1GiB")
    plan = run(make_snapshot([node], [make_job(1), make_job(2).submitted(1)]))
    assert_placed(plan, 1, gpus=[1])
    assert_pending(plan, 2, exact="needs 1 GPU; node n0 has 0 free")


def test_cpu_only_jobs_get_a_node_but_no_gpus() -> None:
    nodes = [make_node("n0").unavailable("down"), make_node("n1").gpus(1).exclusive(0)]
    placement = assert_placed(run(make_snapshot(nodes, [make_job(1).gpus(0)])), 1, node="n1")
    assert placement.gpu_uuids == ()


# -- binpack and CPUs ---------------------------------------------------------


def test_binpack_leaves_no_gpus_stranded_behind_exhausted_cpus() -> None:
    """n0 is fuller, but the job would take its last CPUs and leave 2 idle GPUs no job
    asking for CPUs could use; n1 has CPUs to spare for the GPUs it leaves."""
    nodes = [
        make_node("n0").gpus(4).exclusive(0).cpus(16, used=8),
        make_node("n1").gpus(4).cpus(64),
    ]
    plan = run(make_snapshot(nodes, [make_job(1).gpus(1).cpus(8)]))
    assert_placed(plan, 1, node="n1")


def test_binpack_packs_jobs_without_cpus_as_plain_best_fit() -> None:
    nodes = [
        make_node("n0").gpus(4).exclusive(0).cpus(16, used=8),
        make_node("n1").gpus(4).cpus(64),
    ]
    assert_placed(run(make_snapshot(nodes, [make_job(1).gpus(1)])), 1, node="n0")


def test_binpack_packs_as_before_where_no_gpus_are_stranded() -> None:
    nodes = [
        make_node("n0").gpus(4).cpus(64),
        make_node("n1").gpus(4).exclusive(0).cpus(64, used=8),
    ]
    assert_placed(run(make_snapshot(nodes, [make_job(1).gpus(1).cpus(8)])), 1, node="n1")


def test_cpu_only_jobs_leave_cpus_where_idle_gpus_need_them() -> None:
    """Equal idle GPUs (a tie for plain best fit, which takes n0): on n0 the job takes
    the CPUs its two idle GPUs need; n1 has 8 CPUs per GPU left after it."""
    nodes = [make_node("n0").gpus(2).cpus(16, used=8), make_node("n1").gpus(2).cpus(64, used=8)]
    assert_placed(run(make_snapshot(nodes, [make_job(1).gpus(0).cpus(8)])), 1, node="n1")


def test_stranded_capacity_is_what_free_cpus_cannot_feed_at_the_lower_ratio() -> None:
    """One 80 GiB GPU and 8 CPUs (8 per GPU). A 40 GiB share with 4 CPUs (also 8 per GPU)
    leaves 0.5 GPU and 4 CPUs: fed. With 6 CPUs (12 per GPU) it leaves 2 CPUs, which
    feed 0.25 GPU at the lower ratio, 8: 0.25 GPU stranded."""
    node = NodeState.from_view(make_node("n0").gpus(1).cpus(8).build())
    fed = make_job(1).gpus(1).gpu_memory("40GiB").cpus(4).build()
    hungry = make_job(2).gpus(1).gpu_memory("40GiB").cpus(6).build()
    room = room_of(node)
    for job, stranded in ((fed, 0.0), (hungry, 0.25)):
        assert room.cpus is not None
        gpus, largest, free, cpus = room.gpus, room.largest, room.free, room.free_cpus
        assert stranded_gpus(job, room.cpus, gpus, largest, free, cpus) == stranded
    unaware = Binpack(cpu_aware=False).score(hungry, node, no_data())
    assert unaware == Binpack().score(fed, node, no_data())


# -- shared GPUs --------------------------------------------------------------


def test_shared_jobs_best_fit_onto_the_tightest_shared_gpu() -> None:
    node = make_node("n0").gpus(3).shared(0, "20GiB").shared(1, "50GiB")  # free: 60, 30, 80
    plan = run(make_snapshot([node], [make_job(1).gpu_memory("20GiB")]))
    assert_placed(plan, 1, gpus=[1], memory="20GiB")


def test_shared_jobs_keep_whole_gpus_whole_when_a_shared_one_fits() -> None:
    node = make_node("n0").gpus(2).shared(1, "70GiB")  # GPU 1 has exactly 10GiB free
    plan = run(make_snapshot([node], [make_job(1).gpu_memory("10GiB")]))
    assert_placed(plan, 1, gpus=[1])


def test_shared_jobs_take_an_idle_gpu_when_no_shared_one_fits() -> None:
    node = make_node("n0").gpus(2).shared(0, "70GiB")
    plan = run(make_snapshot([node], [make_job(1).gpu_memory("20GiB")]))
    assert_placed(plan, 1, gpus=[1])


def test_shared_jobs_in_one_cycle_co_locate() -> None:
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(2)],
            [make_job(i).gpu_memory("30GiB").submitted(i) for i in (1, 2, 3)],
        )
    )
    assert [gpu_indices(p) for p in plan.placements] == [[0], [0], [1]]


def test_shared_jobs_never_share_with_an_exclusive_job() -> None:
    node = make_node("n0").gpus(2).exclusive(0)
    plan = run(make_snapshot([node], [make_job(1).gpu_memory("1GiB")]))
    assert_placed(plan, 1, gpus=[1])


def test_an_exclusive_placement_in_the_cycle_blocks_later_shared_jobs() -> None:
    plan = run(
        make_snapshot(
            [make_node("n0").gpus(1)],
            [make_job(1).priority(1), make_job(2).gpu_memory("1GiB")],
        )
    )
    assert_placed(plan, 1)
    assert_pending(plan, 2, layer="devices")


def test_multi_gpu_shared_jobs_take_distinct_gpus() -> None:
    plan = run(make_snapshot([make_node("n0").gpus(3)], [make_job(1).gpus(2).gpu_memory("8GiB")]))
    assert_placed(plan, 1, gpus=[0, 1], memory="8GiB")


def test_binpack_puts_shared_jobs_on_the_node_with_least_free_memory() -> None:
    nodes = [make_node("n0").gpus(2), make_node("n1").gpus(2).shared(0, "40GiB")]
    plan = run(make_snapshot(nodes, [make_job(1).gpu_memory("20GiB")]))
    assert_placed(plan, 1, node="n1", gpus=[0])


def test_spread_puts_shared_jobs_on_the_node_with_most_free_memory() -> None:
    nodes = [make_node("n0").gpus(2).shared(0, "40GiB"), make_node("n1").gpus(2)]
    plan = run(make_snapshot(nodes, [make_job(1).gpu_memory("20GiB")]), placement="spread")
    assert_placed(plan, 1, node="n1")


# -- constraints and health ---------------------------------------------------


def test_the_model_constraint_beats_the_placement_preference() -> None:
    nodes = [make_node("n0").gpus(1, model="A100-40GB"), make_node("n1").gpus(8, model="H100")]
    plan = run(make_snapshot(nodes, [make_job(1).model("H100")]))
    assert_placed(plan, 1, node="n1")


def test_only_gpus_of_the_model_are_picked_on_a_mixed_node() -> None:
    node = make_node("n0").gpus(2, model="A100-40GB", memory="40GiB").gpus(2, model="H100")
    plan = run(make_snapshot([node], [make_job(1).gpus(2).model("h100")]))
    assert_placed(plan, 1, gpus=[2, 3])


def test_model_names_match_loosely() -> None:
    node = make_node("n0").gpus(1, model="NVIDIA H100 80GB HBM3")
    assert_placed(run(make_snapshot([node], [make_job(1).model("h100")])), 1)


def test_unavailable_nodes_take_no_jobs() -> None:
    nodes = [make_node("n0").gpus(8).unavailable("heartbeat lost"), make_node("n1").gpus(1)]
    plan = run(make_snapshot(nodes, [make_job(1), make_job(2).submitted(1)]))
    assert_placed(plan, 1, node="n1")
    assert_pending(plan, 2, layer="health", exact="node n0 unavailable: heartbeat lost")
