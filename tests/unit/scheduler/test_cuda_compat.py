"""A node whose driver is too old for the job's image never takes it (``cuda_compat``)."""

from __future__ import annotations

from dataclasses import replace

from gpudock.core.cuda_require import image_requirements
from gpudock.scheduler.snapshot import JobRequest, NodeView

from .builders import assert_pending, assert_placed, make_job, make_node, make_snapshot, run


def node(name: str, cuda: str | None, driver: str | None = None) -> NodeView:
    return replace(make_node(name).gpus(2).build(), cuda_version=cuda, driver_version=driver)


def needing(job: JobRequest, requirement: str) -> JobRequest:
    found = image_requirements({"NVIDIA_REQUIRE_CUDA": requirement})
    assert found is not None
    return replace(job, cuda_require=found.text())


def test_an_old_driver_blocks_placement_with_both_versions() -> None:
    job = needing(make_job(1).gpus(1).build(), "cuda>=12.4")
    plan = run(make_snapshot([node("gpu-0", "12.2")], [job]))
    assert_pending(
        plan,
        1,
        layer="constraints",
        exact="image needs CUDA ≥ 12.4; node gpu-0 driver supports 12.2",
    )


def test_the_job_goes_to_a_node_whose_driver_supports_it() -> None:
    job = needing(make_job(1).gpus(1).build(), "cuda>=12.4")
    plan = run(make_snapshot([node("a", "12.2"), node("b", "12.6"), node("c", None)], [job]))
    assert_placed(plan, 1, node="b")  # "a" is too old; "c" (unknown) loses the tie to "b"


def test_an_unknown_version_or_a_forward_compatible_driver_may_hold() -> None:
    compat = "cuda>=12.4 brand=tesla,driver>=470,driver<471"
    for cuda, driver in ((None, None), ("11.4", "470.82")):
        job = needing(make_job(1).gpus(1).build(), compat)
        assert_placed(run(make_snapshot([node("a", cuda, driver)], [job])), 1, node="a")
    too_old = needing(make_job(1).gpus(1).build(), compat)
    plan = run(make_snapshot([node("a", "11.4", "460.1")], [too_old]))
    assert_pending(plan, 1, exact="image needs CUDA ≥ 12.4; node a driver supports 11.4")


def test_a_job_without_gpus_ignores_its_images_requirements() -> None:
    job = needing(make_job(1).gpus(0).build(), "cuda>=12.4")
    assert_placed(run(make_snapshot([node("a", "11.0")], [job])), 1, node="a")


def test_every_node_too_old_is_counted() -> None:
    job = needing(make_job(1).gpus(1).build(), "cuda>=12.4")
    plan = run(make_snapshot([node("a", "12.2"), node("b", "12.0")], [job]))
    assert_pending(
        plan, 1, exact="image needs CUDA ≥ 12.4; node a driver supports 12.2 (and 1 more node)"
    )
