"""``never_fits``: the submit-time check, by the profile's filters on each node emptied.

A job is refused only when no node could ever run it ("never on this node":
``UNRESOLVABLE``), in the words its pending reasons would have; a busy, unavailable or
unhealthy node may come back. The field blamed is the one the first ruling-out filter
declares.
"""

from __future__ import annotations

import pytest

from gpudock.config import SchedulerConfig
from gpudock.scheduler.feasibility import Refusal, never_fits
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import JobRequest, NodeView

from .builders import JobBuilder, NodeBuilder, make_job, make_node

PROFILE = build_profile(SchedulerConfig())


def refused(job: JobBuilder, nodes: list[NodeBuilder]) -> Refusal | None:
    return never_fits(job.build(), [n.build() for n in nodes], PROFILE)


def refusal(job: JobBuilder, nodes: list[NodeBuilder]) -> tuple[str, str | None]:
    found = refused(job, nodes)
    assert found is not None, "expected a refusal"
    return found.message, found.field


def test_a_job_that_fits_is_fine() -> None:
    nodes = [make_node("n0").gpus(8, model="H100")]
    assert refused(make_job(1).gpus(8).model("H100").gpu_memory("80GiB"), nodes) is None


def test_more_gpus_than_the_largest_node() -> None:
    nodes = [make_node("n0").gpus(8), make_node("n1").gpus(4)]
    assert refusal(make_job(1).gpus(16), nodes) == (
        "needs 16 GPUs; the largest node has 8 (n0)",
        "gpus",
    )


def test_no_gpus_at_all() -> None:
    assert refusal(make_job(1).gpus(16), [make_node("cpu-0")]) == (
        "needs 16 GPUs; node cpu-0 has none",
        "gpus",
    )


def test_no_node_registered_refuses_nothing() -> None:
    assert never_fits(make_job(1).gpus(16).build(), [], PROFILE) is None


def test_share_larger_than_any_gpu() -> None:
    message, field = refusal(make_job(1).gpu_memory("100GiB"), [make_node("n0").gpus(8)])
    assert message == "needs 100GiB on 1 GPU; the largest GPU has 80GiB (node n0)"
    assert field == "gpus"


def test_unknown_model_lists_the_models_there_are() -> None:
    nodes = [make_node("n0").gpus(2, model="A100-40GB")]
    assert refusal(make_job(1).model("H100"), nodes) == (
        "no GPU of model H100 on any node (have: A100-40GB)",
        "gpu_model",
    )


def test_model_and_count_together() -> None:
    nodes = [
        make_node("n0").gpus(2, model="H100").gpus(6, model="A100-40GB"),
        make_node("n1").gpus(1, model="H100"),
    ]
    assert refusal(make_job(1).gpus(4).model("H100"), nodes) == (
        "needs 4 H100 GPUs; the largest node has 2 (n0)",
        "gpus",
    )


def test_a_selector_no_node_matches_is_refused_in_node_affinitys_words() -> None:
    nodes = [make_node("n0").gpus(8).label("zone", "a"), make_node("n1").gpus(8)]
    message, field = refusal(make_job(1).selector("zone", "eu"), nodes)
    assert message == "no node matches node selector zone=eu"
    assert field == "node_selector"


def test_a_taint_no_job_tolerates_is_refused() -> None:
    nodes = [make_node("n0").gpus(8).taint("dedicated=infra:NoSchedule")]
    message, field = refusal(make_job(1), nodes)
    assert message.startswith("1 node has taints it does not tolerate (n0: dedicated=infra")
    assert field == "node_selector"


def test_constraints_that_together_rule_out_every_node() -> None:
    nodes = [
        make_node("n0").gpus(8, model="H100"),
        make_node("n1").gpus(8, model="A100-80GB").label("zone", "eu"),
    ]
    message, field = refusal(make_job(1).model("H100").selector("zone", "eu"), nodes)
    assert message.startswith("no node meets all its constraints: node n0 lacks label zone=eu")
    assert field == "node_selector"  # the first filter that rules out a node


def test_cpu_only_jobs_fit_where_the_cpus_are() -> None:
    assert refused(make_job(1).gpus(0).model("H100"), [make_node("n0")]) is None


def test_busy_unavailable_and_unhealthy_nodes_still_count() -> None:
    nodes = [make_node("n0").gpus(4).exclusive(0, 1).unhealthy(2).unavailable("down")]
    assert refused(make_job(1).gpus(4), nodes) is None


def test_a_gang_needs_that_many_nodes() -> None:
    assert refusal(make_job(1).gpus(8).nodes(2), [make_node("n0").gpus(8)]) == (
        "needs 2 nodes (a gang) that can each take 8 GPUs; the cluster has 1 node",
        None,
    )
    nodes = [make_node("n0").gpus(8), make_node("n1").gpus(4)]
    message, field = refusal(make_job(1).gpus(8).nodes(2), nodes)
    assert message == (
        "needs 2 nodes (a gang) that can each take 8 GPUs; 1 of 2 can (node n1 has 4 GPUs)"
    )
    assert field == "gpus"


def test_more_cpus_than_any_node_offers_never_fits() -> None:
    nodes = [make_node("n0").gpus(1).cpus(16), make_node("n1").gpus(1).cpus(8)]
    assert refusal(make_job(1).cpus(17), nodes) == (
        "needs 17 CPUs; the largest node has 16 (n0)",
        "cpus",
    )
    assert refused(make_job(1).cpus(16), nodes) is None


def test_a_node_that_does_not_count_cpus_fits_any_cpus() -> None:
    nodes = [make_node("n0").gpus(1).cpus(4), make_node("n1").gpus(1)]
    assert refused(make_job(1).cpus(64), nodes) is None


def test_memory_above_every_node_never_fits_but_busy_memory_is_not_never() -> None:
    nodes = [
        make_node("a").gpus(1).memory("16GiB", used="16GiB"),
        make_node("b").gpus(1).memory("8GiB"),
    ]
    assert refusal(make_job(1).gpus(0).memory("17GiB"), nodes) == (
        "needs 17GiB memory; the largest node has 16GiB (a)",
        "memory",
    )
    assert refused(make_job(1).gpus(0).memory("16GiB"), nodes) is None


@pytest.mark.parametrize("nodes", [[make_node("b").build()], []])
def test_memory_is_not_refused_where_no_node_counts_it(nodes: list[NodeView]) -> None:
    job: JobRequest = make_job(2).memory("1TiB").gpus(0).build()
    assert never_fits(job, nodes, PROFILE) is None
