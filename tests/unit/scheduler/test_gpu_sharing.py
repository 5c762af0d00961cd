"""A node's sharing mode (``executor.sharing``) decides which shared jobs it may take."""

from __future__ import annotations

from dataclasses import replace

from gpudock.scheduler.snapshot import NodeView

from .builders import assert_pending, assert_placed, make_job, make_node, make_snapshot, run


def node(name: str, mode: str | None) -> NodeView:
    return replace(make_node(name).gpus(2).build(), gpu_sharing=mode)


def test_an_exclusive_node_takes_no_share_but_whole_gpus() -> None:
    nodes = [node("a", "exclusive"), node("b", "time-slice")]
    jobs = [make_job(1).gpus(1).gpu_memory("4GiB"), make_job(2).gpus(2)]
    plan = run(make_snapshot(nodes, jobs))
    assert_placed(plan, 1, node="b")  # "a" would win the tie on name
    assert_placed(plan, 2, node="a")


def test_a_compute_share_needs_mps_or_an_unknown_mode() -> None:
    share = make_job(1).gpus(1).gpu_memory("4GiB")
    computed = replace(share.build(), gpu_compute=30)
    for mode, placed in (("mps", True), (None, True), ("time-slice", False)):
        plan = run(make_snapshot([node("a", mode)], [computed]))
        if placed:
            assert_placed(plan, 1, node="a")
        else:
            assert_pending(
                plan,
                1,
                layer="constraints",
                exact="node a time-slices its GPUs (executor.sharing: time-slice), which "
                "cannot hold a job to a compute share: gpu_compute needs MPS",
            )
    plain = run(make_snapshot([node("a", "time-slice")], [share]))
    assert_placed(plain, 1, node="a")  # a share without gpu_compute time-slices


def test_every_exclusive_node_says_why_a_share_waits() -> None:
    nodes = [node("a", "exclusive"), node("b", "exclusive")]
    plan = run(make_snapshot(nodes, [make_job(1).gpus(1).gpu_memory("4GiB")]))
    assert_pending(
        plan,
        1,
        exact="node a gives whole GPUs only (executor.sharing: exclusive): a gpu_memory "
        "share never runs there (and 1 more node)",
    )
