"""What ``gpudock show`` reports of the preemption rules for one job (``services/preemption``):
the scheduler's own rules, read on the job as the snapshot shows it."""

from __future__ import annotations

from gpudock.core.job import Job, JobSpec, JobState
from gpudock.scheduler.preemption_rules import PreemptionRules
from gpudock.services.preemption import protection_of

RULES = PreemptionRules(restart_cost=60.0, exempt_time=600.0)


def running(**spec: object) -> Job:
    return Job(
        id=7,
        spec=JobSpec(image="img", gpus=1, **spec),  # type: ignore[arg-type]
        user="al",
        state=JobState.RUNNING,
        submitted_at=0.0,
        allocated_at=100.0,
        started_at=190.0,  # 90 s from allocation to running: longer than the cluster's minute
        node="n0",
        gpu_uuids=("GPU-0",),
    )


def test_a_job_inside_its_protected_time_says_until_when() -> None:
    seen = protection_of(running(), RULES, now=400.0)
    assert seen is not None
    assert (seen.protected_until, seen.protected_for) == (790.0, 600.0)
    assert (seen.restart_cost, seen.lost_work) == (90.0, 0.0)  # its measured start


def test_past_its_protection_a_job_shows_what_a_preemption_would_cost_it() -> None:
    seen = protection_of(running(restart_cost=20, checkpoint_interval=300), RULES, now=1000.0)
    assert seen is not None
    assert seen.protected_until is None
    assert (seen.restart_cost, seen.lost_work) == (20.0, 210.0)  # 810 s in, checkpoints at 600


def test_a_min_runtime_longer_than_the_cluster_s_protects_longer() -> None:
    seen = protection_of(running(min_runtime="1h"), RULES, now=1000.0)
    assert seen is not None and seen.protected_until == 190.0 + 3600


def test_only_a_job_holding_gpus_has_anything_to_protect() -> None:
    job = running()
    job.state = JobState.PENDING
    assert protection_of(job, RULES, now=1000.0) is None
    never = protection_of(running(preemptible=False), RULES, now=400.0)
    assert never is not None and not never.preemptible and never.protected_until is None
