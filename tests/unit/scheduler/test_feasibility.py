"""``never_fits``: the submit-time check for jobs no waiting can ever place."""

from __future__ import annotations

import pytest

from gpudock.scheduler.feasibility import never_fits, never_fits_cpus, never_fits_memory

from .builders import make_job, make_node


def test_a_job_that_fits_is_fine() -> None:
    nodes = [make_node("n0").gpus(8, model="H100").build()]
    assert never_fits(make_job(1).gpus(8).model("H100").gpu_memory("80GiB").build(), nodes) is None


def test_more_gpus_than_the_largest_node() -> None:
    nodes = [make_node("n0").gpus(8).build(), make_node("n1").gpus(4).build()]
    assert never_fits(make_job(1).gpus(16).build(), nodes) == (
        "needs 16 GPUs but the largest node has 8"
    )


@pytest.mark.parametrize("nodes", [[], [make_node("cpu-0").build()]])
def test_no_gpus_at_all(nodes: list[object]) -> None:
    assert never_fits(make_job(1).gpus(16).build(), nodes) == (  # type: ignore[arg-type]
        "needs 16 GPUs but no node has GPUs"
    )


def test_share_larger_than_any_gpu() -> None:
    nodes = [make_node("n0").gpus(8, memory="80GiB").build()]
    assert never_fits(make_job(1).gpu_memory("100GiB").build(), nodes) == (
        "needs 100GiB per GPU but the largest GPU has 80GiB"
    )


def test_unknown_model_lists_the_models_there_are() -> None:
    nodes = [make_node("n0").gpus(2, model="A100-40GB").build()]
    assert never_fits(make_job(1).model("H100").build(), nodes) == (
        "no node has GPU model H100 (have: A100-40GB)"
    )


def test_model_and_count_together() -> None:
    nodes = [
        make_node("n0").gpus(2, model="H100").gpus(6, model="A100-40GB").build(),
        make_node("n1").gpus(1, model="H100").build(),
    ]
    assert never_fits(make_job(1).gpus(4).model("H100").build(), nodes) == (
        "needs 4 H100 GPUs but the largest node has 2 H100"
    )


def test_model_and_share_together() -> None:
    nodes = [
        make_node("n0")
        .gpus(1, model="H100", memory="80GiB")
        .gpus(1, model="A100-40GB", memory="40GiB")
        .build()
    ]
    assert never_fits(make_job(1).model("A100").gpu_memory("60GiB").build(), nodes) == (
        "needs 60GiB per GPU but the largest A100 GPU has 40GiB"
    )


def test_shared_job_with_too_few_big_gpus_on_one_node() -> None:
    nodes = [make_node("n0").gpus(2, memory="80GiB").gpus(6, memory="16GiB").build()]
    assert never_fits(make_job(1).gpus(4).gpu_memory("20GiB").build(), nodes) == (
        "needs 4 GPUs with 20GiB but the largest node has 2 such GPUs"
    )


def test_cpu_only_jobs_always_fit() -> None:
    assert never_fits(make_job(1).gpus(0).model("H100").build(), []) is None


def test_busy_unavailable_and_unhealthy_nodes_still_count() -> None:
    nodes = [make_node("n0").gpus(4).exclusive(0, 1).unhealthy(2).unavailable("down").build()]
    assert never_fits(make_job(1).gpus(4).build(), nodes) is None


def test_a_gang_needs_that_many_nodes() -> None:
    nodes = [make_node("n0").gpus(8).build()]
    assert never_fits(make_job(1).gpus(8).nodes(2).build(), nodes) == (
        "needs 2 nodes (a gang) but the cluster has 1 node"
    )


def test_more_cpus_than_any_node_offers_never_fits() -> None:
    nodes = [make_node("n0").cpus(16).build(), make_node("n1").cpus(8).build()]
    assert never_fits_cpus(make_job(1).cpus(17).build(), nodes, {}) == (
        "needs 17 CPUs but the largest node has 16"
    )
    assert never_fits_cpus(make_job(1).cpus(16).build(), nodes, {}) is None


def test_a_node_without_configured_cpus_offers_its_host_count() -> None:
    nodes = [make_node("n0").build()]
    assert never_fits_cpus(make_job(1).cpus(2.5).build(), nodes, {"n0": 2}) == (
        "needs 2.5 CPUs but the largest node has 2"
    )
    assert never_fits_cpus(make_job(1).cpus(2).build(), nodes, {"n0": 2}) is None


def test_a_node_of_unknown_capacity_may_fit_any_cpus() -> None:
    nodes = [make_node("n0").cpus(4).build(), make_node("n1").build()]
    assert never_fits_cpus(make_job(1).cpus(64).build(), nodes, {}) is None


def test_jobs_without_cpus_always_fit_on_cpus() -> None:
    nodes = [make_node("n0").cpus(1).build()]
    assert never_fits_cpus(make_job(1).build(), nodes, {}) is None


def test_memory_above_every_node_never_fits() -> None:
    nodes = [
        make_node("a").memory("16GiB", used="16GiB").build(),
        make_node("b").memory("8GiB").build(),
    ]
    job = make_job(1).gpus(0)
    assert never_fits_memory(job.memory("17GiB").build(), nodes) == (
        "needs 17GiB memory but the largest node has 16GiB"
    )
    assert never_fits_memory(job.memory("16GiB").build(), nodes) is None  # busy is not never


def test_memory_is_not_refused_without_a_request_or_where_a_node_does_not_count_it() -> None:
    counted = make_node("a").memory("16GiB").build()
    assert never_fits_memory(make_job(1).build(), [counted]) is None
    uncounted = make_node("b").build()
    assert never_fits_memory(make_job(2).memory("1TiB").build(), [counted, uncounted]) is None
    assert never_fits_memory(make_job(3).memory("1TiB").build(), []) is None
