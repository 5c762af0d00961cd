"""MIG devices as allocatable units: a MIG job takes one device of its profile, whole."""

from __future__ import annotations

from gpudock.config import SchedulerConfig
from gpudock.scheduler.capacity import CycleState, ReservationError
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import Plan

from .builders import assert_pending, assert_placed, make_job, make_node, make_snapshot, run

H100 = "NVIDIA H100 80GB HBM3"


def mig_of(plan: Plan, job_id: int) -> str | None:
    placement = assert_placed(plan, job_id)
    assert placement.gpu_uuids == ()  # a MIG job takes no GPU
    return placement.mig


def test_a_mig_job_takes_a_free_device_of_its_profile() -> None:
    node = make_node("gpu-0").gpus(2, model=H100).mig(0, "1g.10gb", "3g.40gb", held=1)
    plan = run(make_snapshot([node], [make_job(1).mig("1g.10gb"), make_job(2).mig("3g.40gb")]))
    assert mig_of(plan, 2) == "MIG-gpu-0-0-1"
    assert_pending(
        plan, 1, layer="devices", exact="needs mig 1g.10gb; node gpu-0 has no free MIG device"
    )


def test_each_device_is_taken_once_in_a_cycle() -> None:
    node = make_node("gpu-0").gpus(1, model=H100).mig(0, "1g.10gb", "1g.10gb", "3g.40gb")
    jobs = [make_job(i).mig("1g.10gb") for i in (1, 2, 3)]
    plan = run(make_snapshot([node], jobs))
    assert {mig_of(plan, 1), mig_of(plan, 2)} == {"MIG-gpu-0-0-0", "MIG-gpu-0-0-1"}
    assert_pending(plan, 3, exact="needs mig 1g.10gb; node gpu-0 has 1 free 3g.40gb")


def test_the_pending_reason_names_what_is_free() -> None:
    node = make_node("gpu-0").gpus(1, model=H100).mig(0, "1g.10gb", "1g.10gb")
    plan = run(make_snapshot([node], [make_job(1).mig("3g.40gb")]))
    assert_pending(plan, 1, exact="needs mig 3g.40gb; node gpu-0 has 2 free 1g.10gb")


def test_a_gpu_in_mig_mode_takes_no_whole_or_share_job() -> None:
    node = make_node("gpu-0").gpus(1, model=H100).mig(0, "7g.80gb")
    plan = run(make_snapshot([node], [make_job(1).gpus(1), make_job(2).gpus(1).gpu_memory("1GiB")]))
    assert_pending(plan, 1)
    assert_pending(plan, 2)


def test_a_mig_job_goes_to_the_node_that_has_its_profile() -> None:
    nodes = [
        make_node("a").gpus(1, model=H100).mig(0, "2g.20gb"),
        make_node("b").gpus(1, model=H100).mig(0, "1g.10gb"),
        make_node("c").gpus(2, model=H100),
    ]
    plan = run(make_snapshot(nodes, [make_job(1).mig("1g.10gb"), make_job(2).gpus(2)]))
    assert mig_of(plan, 1) == "MIG-b-0-0"
    assert_placed(plan, 2, node="c")


def test_no_gpu_offering_the_profile_is_never() -> None:
    node = make_node("gpu-0").gpus(2, model="Tesla T4")
    plan = run(make_snapshot([node], [make_job(1).mig("1g.10gb")]))
    assert_pending(plan, 1, exact="needs mig 1g.10gb; no node's GPUs offer it")


def test_reserve_changes_nothing_when_no_device_is_free() -> None:
    node = make_node("gpu-0").gpus(1, model=H100).cpus(8).mig(0, "1g.10gb", held=1).build()
    state = CycleState([node])
    job = make_job(1).mig("1g.10gb").cpus(2).build()
    try:
        state.reserve(job, "gpu-0", [])
    except ReservationError:
        pass
    else:
        raise AssertionError("a held device was taken")
    assert state.nodes["gpu-0"].free_cpus == 8


def test_the_index_and_the_generic_path_place_mig_jobs_alike() -> None:
    nodes = [
        make_node("a").gpus(2, model=H100).mig(0, "1g.10gb", "1g.10gb", "3g.40gb", held=1),
        make_node("b").gpus(1, model=H100).mig(0, "3g.40gb", "3g.40gb"),
        make_node("c").gpus(2, model=H100).cpus(4),
    ]
    jobs = [make_job(i).mig(p) for i, p in enumerate(["1g.10gb", "3g.40gb"] * 3, start=1)]
    jobs += [make_job(9).gpus(1), make_job(10).mig("1g.10gb").cpus(8)]
    snapshot = make_snapshot(nodes, jobs)
    profile = build_profile(SchedulerConfig())
    fast, generic = (run_cycle(snapshot, profile, index=i) for i in (True, False))
    assert fast.placements == generic.placements
    assert fast.pending == generic.pending
    assert len([p for p in fast.placements if p.mig]) == 4  # 1 + 3 free devices of the two
