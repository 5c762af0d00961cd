"""Hold, release, requeue and update on the real store (SQLite and PostgreSQL):
``services/job_controls.py``. Nothing runs in the background: jobs move only as
the test moves them, through the store's ``transition``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpudock.config import SchedulerConfig, ServerConfig
from gpudock.core.errors import Conflict, Forbidden, Infeasible, InvalidInput, NotFound
from gpudock.core.job import Job, JobSpec, JobState
from gpudock.gpus import emulated_inventory
from gpudock.runtime import finisher
from gpudock.runtime.reconciler import _stop_unstarted
from gpudock.server import Server, build_server
from gpudock.services.job_controls import JobControls
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.events import list_events
from gpudock.store.snapshot import load_snapshot
from gpudock.store.tokens import Principal

ALICE = Principal(user="alice", is_admin=False)
BOB = Principal(user="bob", is_admin=False)
ADMIN = Principal(user="admin", is_admin=True)
SCHEDULER = {
    "priority_classes": [
        {"name": "batch", "value": -10},
        {"name": "urgent", "value": 100, "preempt": True, "users": ["bob"]},
    ],
}


@pytest.fixture
def server(tmp_path: Path, db_url: str) -> Iterator[Server]:
    config = ServerConfig(scheduler=SchedulerConfig.model_validate(SCHEDULER))
    server = build_server(tmp_path, config, db_url=db_url, emulate_gpus="4xH100-80GB")
    yield server
    server.ctx.shutdown()
    server.ctx.db.close()


@pytest.fixture
def controls(server: Server) -> JobControls:
    return JobControls(server.ctx)


def submit(controls: JobControls, principal: Principal = ALICE, **spec: Any) -> Job:
    return controls.submit(JobSpec.model_validate({"image": "img", **spec}), principal)


def move(controls: JobControls, job: Job, *states: JobState) -> None:
    """Walk the job through ``states`` as the scheduler and launcher would."""
    current = controls.get(job.id, ADMIN).state
    fields: dict[JobState, dict[str, Any]] = {
        JobState.ALLOCATED: {"node": "n0"},
        JobState.STARTING: {"container_name": f"c-{job.id}"},
        JobState.RUNNING: {"started_at": 1.0},
    }
    with controls.ctx.db.write() as session:
        for state in states:
            assert job_store.transition(session, job.id, current, state, 1.0, **fields[state])
            current = state


def conflict(call: Any, *args: Any) -> str:
    with pytest.raises(Conflict) as caught:
        call(*args)
    assert caught.value.status_code == 409
    return caught.value.message


# --- hold and release ---------------------------------------------------------------


def test_hold_says_who_holds_the_job_at_once_and_release_clears_it(
    controls: JobControls,
) -> None:
    job = submit(controls)

    held = controls.hold(job.id, ALICE)

    assert (held.state, held.held_by) == (JobState.PENDING, "alice")
    assert [(r.layer, r.message) for r in held.pending_reasons] == [("hold", "held by alice")]
    released = controls.release(job.id, ALICE)
    assert (released.held_by, released.held_at, released.pending_reasons) == (None, None, [])
    with controls.ctx.db.read() as session:
        changes = [
            e.payload for e in list_events(session, job_id=job.id) if e.type == "job.changed"
        ]
    assert changes == [{"action": "hold", "by": "alice"}, {"action": "release", "by": "alice"}]


def test_hold_twice_and_release_of_a_job_not_held_are_409_and_change_nothing(
    controls: JobControls,
) -> None:
    job = submit(controls)
    controls.hold(job.id, ALICE)

    assert conflict(controls.hold, job.id, ADMIN) == f"job {job.id} is already held (by alice)"
    assert controls.get(job.id, ALICE).held_by == "alice"
    controls.release(job.id, ALICE)
    assert conflict(controls.release, job.id, ALICE) == f"job {job.id} is not held"


def test_only_a_pending_job_can_be_held(controls: JobControls) -> None:
    job = submit(controls, gpus=1)
    move(controls, job, JobState.ALLOCATED, JobState.STARTING, JobState.RUNNING)

    assert conflict(controls.hold, job.id, ALICE) == (
        f"job {job.id} is RUNNING; only a PENDING job is held"
    )
    assert controls.get(job.id, ALICE).held_by is None


def test_another_users_job_is_not_found_for_every_control(controls: JobControls) -> None:
    job = submit(controls)
    for call, args in (
        (controls.hold, ()),
        (controls.release, ()),
        (controls.requeue, ()),
        (controls.update, ({"gpus": 2},)),
    ):
        with pytest.raises(NotFound, match=f"job {job.id} not found"):
            call(job.id, *args, BOB)  # type: ignore[operator]
    assert controls.hold(job.id, ADMIN).held_by == "admin"  # admins may


def test_a_held_job_is_never_allocated_even_by_a_stale_plan(controls: JobControls) -> None:
    job = submit(controls)
    controls.hold(job.id, ALICE)
    with controls.ctx.db.write() as session:
        moved = job_store.transition(
            session, job.id, JobState.PENDING, JobState.ALLOCATED, 2.0, node="n0"
        )
    assert not moved and controls.get(job.id, ALICE).state is JobState.PENDING


# --- requeue ------------------------------------------------------------------------


def test_requeue_asks_the_runtime_to_stop_and_spends_no_retry(controls: JobControls) -> None:
    job = submit(controls, gpus=1, retries=0)
    move(controls, job, JobState.ALLOCATED, JobState.STARTING, JobState.RUNNING)

    asked = controls.requeue(job.id, ALICE)

    assert (asked.state, asked.stop_requested, asked.stop_requested_by) == (
        JobState.RUNNING,
        "requeue",
        "alice",
    )
    ended = finisher.outcome(asked, None)
    assert (ended.state, ended.reason, ended.failed_attempt) == (
        JobState.PENDING,
        "requeued by alice; no retry used",
        False,
    )
    assert (
        conflict(controls.requeue, job.id, ALICE) == f"job {job.id} is already stopping (requeue)"
    )


def test_an_allocated_job_requeued_goes_back_to_pending_with_its_gpus_freed(
    controls: JobControls,
) -> None:
    job = submit(controls, gpus=1)
    move(controls, job, JobState.ALLOCATED)
    controls.requeue(job.id, ALICE)

    _stop_unstarted(controls.ctx, controls.get(job.id, ALICE))

    back = controls.get(job.id, ALICE)
    assert (back.state, back.attempt, back.failures, back.reason) == (
        JobState.PENDING,
        1,
        0,
        "requeued by alice; no retry used",
    )


def test_requeue_of_a_pending_or_finished_job_is_409(controls: JobControls) -> None:
    job = submit(controls)
    assert conflict(controls.requeue, job.id, ALICE) == (
        f"job {job.id} is PENDING; only an ALLOCATED, STARTING or RUNNING job can be requeued"
    )
    controls.cancel(job.id, ALICE)
    assert "is CANCELLED" in conflict(controls.requeue, job.id, ALICE)


# --- update -------------------------------------------------------------------------


def test_a_pending_job_is_updated_and_revalidated_as_a_submit(controls: JobControls) -> None:
    job = submit(controls, gpus=1)

    changed = controls.update(
        job.id, {"gpus": 2, "max_runtime": "2h", "priority_class": "batch"}, ALICE
    )

    assert (changed.spec.gpus, changed.spec.max_runtime, changed.spec.priority) == (2, 7200, -10)
    with pytest.raises(Infeasible, match=r"needs 64 GPUs; node \S+ has only 4$"):
        controls.update(job.id, {"gpus": 64}, ALICE)
    with pytest.raises(Forbidden, match="priority class 'urgent' is not granted to user alice"):
        controls.update(job.id, {"priority_class": "urgent"}, ALICE)
    with pytest.raises(InvalidInput, match="max_runtime: duration must be greater than zero"):
        controls.update(job.id, {"max_runtime": "0s"}, ALICE)
    with pytest.raises(InvalidInput, match="image cannot be updated"):
        controls.update(job.id, {"image": "other"}, ALICE)
    after = controls.get(job.id, ALICE)
    assert (after.spec.gpus, after.spec.priority) == (2, -10)  # the refusals changed nothing


def test_a_granted_class_raises_the_priority_and_lets_the_job_preempt(
    controls: JobControls,
) -> None:
    job = submit(controls, BOB)
    changed = controls.update(job.id, {"priority_class": "urgent"}, BOB)
    assert changed.spec.priority == 100
    with controls.ctx.db.read() as session:
        (request,) = load_snapshot(session, 0.0).pending
    assert (request.priority, request.can_preempt) == (100, True)


def test_a_running_job_may_only_have_its_max_runtime_lowered_by_its_owner(
    controls: JobControls,
) -> None:
    job = submit(controls, gpus=1, max_runtime="2h")
    move(controls, job, JobState.ALLOCATED, JobState.STARTING, JobState.RUNNING)

    assert controls.update(job.id, {"max_runtime": "1h"}, ALICE).spec.max_runtime == 3600
    assert conflict(controls.update, job.id, {"max_runtime": "3h"}, ALICE) == (
        f"job {job.id} is RUNNING: max_runtime may only be lowered (it is 1h00m)"
    )
    assert conflict(controls.update, job.id, {"gpus": 2}, ALICE) == (
        f"job {job.id} is RUNNING: only its max_runtime may be lowered "
        "(gpus can change only while it is PENDING)"
    )
    with pytest.raises(Forbidden, match=r"only the owner \(alice\)"):
        controls.update(job.id, {"max_runtime": "30m"}, ADMIN)
    assert controls.get(job.id, ALICE).spec.max_runtime == 3600


def test_update_of_a_finished_job_is_409(controls: JobControls) -> None:
    job = submit(controls)
    controls.cancel(job.id, ALICE)
    assert conflict(controls.update, job.id, {"gpus": 2}, ALICE) == (
        f"job {job.id} already CANCELLED; it cannot be updated"
    )


def test_downgrade_to_0006_and_back_keeps_jobs_and_their_history(controls: JobControls) -> None:
    from alembic import command
    from alembic.config import Config

    from gpudock.store.db import _MIGRATIONS

    job = submit(controls)
    controls.hold(job.id, ALICE)
    db = controls.ctx.db
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0006")

    db.migrate()

    back = controls.get(job.id, ALICE)
    assert (back.state, back.held_by) == (JobState.PENDING, None)  # the hold went with 0007
    with db.read() as session:
        assert [e["to"] for e in job_store.job_events(session, job.id)] == ["PENDING"]


def test_submit_counts_a_node_that_joined_after_the_nodes_were_cached(
    controls: JobControls,
) -> None:
    """The cached nodes can only speed an acceptance: a registration bumps the cluster
    version (they are read again), and a refusal reads the store."""
    ctx = controls.ctx
    assert submit(controls, gpus=1).state == JobState.PENDING  # caches the 4-GPU node
    bigger = emulated_inventory("n1", "8xH100-80GB")
    with ctx.db.write() as session:
        inv_store.register_node(session, bigger, ctx.clock())

    assert submit(controls, gpus=8).state == JobState.PENDING
    with pytest.raises(Infeasible, match=r"needs 64 GPUs; the largest node has 8 \("):
        submit(controls, gpus=64)
