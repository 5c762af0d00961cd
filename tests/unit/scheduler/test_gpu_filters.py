"""The sharing, CUDA and health filters are node-only: heard by every step.

Each declares ``NodeOnly``, so placement avoids the nodes it rejects, preemption and the
EASY reservation never pick them, and the submit check refuses a job that every node
rules out as "never" (``UNRESOLVABLE``), in the filter's words and blaming its field.
"""

from __future__ import annotations

from dataclasses import replace

from gpudock.config import SchedulerConfig
from gpudock.core.cuda_require import image_requirements
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.feasibility import never_fits
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import JobRequest, NodeView, Plan, Snapshot

from .builders import make_job, make_node, make_running, make_snapshot

PROFILE = build_profile(SchedulerConfig())
XID = "quarantined: XID 48 (double bit ECC error); needs a GPU reset"


def cuda(job: JobRequest, requirement: str = "cuda>=12.4") -> JobRequest:
    found = image_requirements({"NVIDIA_REQUIRE_CUDA": requirement})
    assert found is not None
    return replace(job, cuda_require=found.text())


def both(snapshot: Snapshot) -> Plan:
    plan = run_cycle(snapshot, PROFILE)
    assert plan == run_cycle(snapshot, PROFILE, index=False)
    return plan


def nodes(old: NodeView) -> list[NodeView]:
    """``new`` can take the job; ``old`` is the one the filter rejects, first by name."""
    return [make_node("new").gpus(2).build(), old]


def test_the_submit_check_refuses_in_the_filters_words() -> None:
    old = replace(make_node("gpu-0").gpus(2).build(), cuda_version="12.2")
    found = never_fits(cuda(make_job(1).build()), [old], PROFILE)
    assert found is not None and (found.message, found.field) == (
        "image needs CUDA ≥ 12.4; node gpu-0 driver supports 12.2",
        "image",
    )
    sliced = replace(make_node("gpu-0").gpus(2).build(), gpu_sharing="time-slice")
    computed = replace(make_job(1).gpu_memory("4GiB").build(), gpu_compute=30)
    found = never_fits(computed, [sliced], PROFILE)
    assert found is not None and found.field == "gpu_compute"
    assert "gpu_compute needs MPS" in found.message
    quarantined = replace(
        make_node("gpu-0").gpus(2).unhealthy(1).build(), out_of_service=((1, XID),)
    )
    assert never_fits(make_job(1).gpus(2).build(), [quarantined], PROFILE) is None  # not now


def test_a_mig_job_is_refused_only_where_no_gpu_offers_its_profile() -> None:
    t4 = make_node("gpu-0").gpus(2, model="Tesla T4").build()
    found = never_fits(make_job(1).mig("1g.10gb").build(), [t4], PROFILE)
    assert found is not None and (found.message, found.field) == (
        "needs mig 1g.10gb; no node's GPUs offer it",
        "mig",
    )
    h100 = make_node("gpu-0").gpus(1, model="NVIDIA H100 80GB HBM3")
    taken = h100.mig(0, "1g.10gb", held=1).build()
    assert never_fits(make_job(1).mig("1g.10gb").build(), [taken], PROFILE) is None


def test_preemption_and_the_reservation_avoid_rejected_nodes() -> None:
    for old in (
        replace(make_node("old").gpus(2).build(), cuda_version="12.2"),
        replace(make_node("old").gpus(2).unhealthy(1).build(), out_of_service=((1, XID),)),
    ):
        running = [
            make_running(10).on("new", 0, 1).priority(2).max_runtime(900),
            make_running(11).on("old", 0).priority(1).max_runtime(100),  # cheaper, sooner
        ]
        job = cuda(make_job(1).gpus(2).priority(10).build())
        plan = both(make_snapshot(nodes(old), [job], now=10, running=running))
        assert [p.victim_id for p in plan.preemptions] == [10]
        waiting = cuda(make_job(1).gpus(2).cannot_preempt().build())
        plan = both(make_snapshot(nodes(old), [waiting], running=running))
        assert [r.node for r in plan.reservations] == ["new"]
