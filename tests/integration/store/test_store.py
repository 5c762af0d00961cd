"""The store on real SQLite and PostgreSQL: transitions, allocation, races."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy.exc import IntegrityError

from gpudock.core.errors import IllegalTransition
from gpudock.core.inventory import GpuInfo, NodeInventory
from gpudock.core.job import JobSpec, JobState
from gpudock.scheduler.snapshot import Placement, Plan
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.applier import apply_plan
from gpudock.store.db import Database
from gpudock.store.models import GpuRow, JobRow

GIB = 1024**3


def node(n_gpus: int = 4, name: str = "n0") -> NodeInventory:
    gpus = tuple(
        GpuInfo(index=i, uuid=f"GPU-{name}-{i}", name="NVIDIA H100", memory_total=80 * GIB)
        for i in range(n_gpus)
    )
    return NodeInventory(name=name, gpus=gpus, source="emulated")


@pytest.fixture
def db(db_url: str) -> Database:
    database = Database.open(db_url)
    with database.write() as s:
        inv_store.register_node(s, node(), now=0.0)
    yield database
    database.close()


def submit(db: Database, **spec: object) -> int:
    with db.write() as s:
        return job_store.insert_job(s, JobSpec(image="img", **spec), "alice", now=1.0).id  # type: ignore[arg-type]


def gpu_rows(db: Database) -> dict[str, tuple[int, int | None, int]]:
    with db.read() as s:
        return {g.uuid: (g.used_memory, g.exclusive_job, g.shared_jobs) for g in s.query(GpuRow)}


def test_migrations_are_idempotent(db_url: str) -> None:
    Database.open(db_url).close()
    Database.open(db_url).close()  # second start finds the schema at head


def test_submitted_job_is_pending_with_history(db: Database) -> None:
    job_id = submit(db, gpus=1)
    with db.read() as s:
        job = job_store.get_job(s, job_id)
        events = job_store.job_events(s, job_id)
    assert job is not None and job.state is JobState.PENDING
    assert [e["to"] for e in events] == ["PENDING"]


def test_illegal_transition_is_refused(db: Database) -> None:
    job_id = submit(db)
    with pytest.raises(IllegalTransition), db.write() as s:
        job_store.transition(s, job_id, JobState.PENDING, JobState.RUNNING, 2.0)
    with pytest.raises(IllegalTransition, match="needs a reason"), db.write() as s:
        job_store.transition(s, job_id, JobState.PENDING, JobState.CANCELLED, 2.0)


def test_transition_is_conditional_on_the_current_state(db: Database) -> None:
    job_id = submit(db)
    with db.write() as s:
        assert job_store.transition(s, job_id, JobState.PENDING, JobState.CANCELLED, 2.0, "by me")
    with db.write() as s:
        assert not job_store.transition(s, job_id, JobState.PENDING, JobState.ALLOCATED, 3.0)
    with db.read() as s:
        job = job_store.get_job(s, job_id)
    assert job is not None and job.state is JobState.CANCELLED and job.reason == "by me"


def test_applier_allocates_and_release_frees(db: Database) -> None:
    job_id = submit(db, gpus=2)
    plan = Plan(placements=[Placement(job_id, "n0", ("GPU-n0-0", "GPU-n0-1"))])
    result = apply_plan(db, plan, now=2.0)
    assert [p.job_id for p in result.committed] == [job_id]
    rows = gpu_rows(db)
    assert rows["GPU-n0-0"] == (80 * GIB, job_id, 0)
    with db.write() as s:
        job_store.transition(s, job_id, JobState.ALLOCATED, JobState.CANCELLED, 3.0, "x")
    assert gpu_rows(db)["GPU-n0-0"] == (0, None, 0)


def test_applier_rejects_exclusive_on_a_busy_gpu(db: Database) -> None:
    first, second = submit(db, gpus=1), submit(db, gpus=1)
    apply_plan(db, Plan(placements=[Placement(first, "n0", ("GPU-n0-0",))]), now=2.0)
    result = apply_plan(db, Plan(placements=[Placement(second, "n0", ("GPU-n0-0",))]), now=2.0)
    assert result.committed == [] and len(result.rejected) == 1
    with db.read() as s:
        job = job_store.get_job(s, second)
    assert job is not None and job.state is JobState.PENDING


def test_shared_jobs_share_until_memory_runs_out_and_never_with_exclusive(db: Database) -> None:
    shares = [submit(db, gpus=1, gpu_memory="30GiB") for _ in range(3)]
    plan = Plan(placements=[Placement(j, "n0", ("GPU-n0-0",), 30 * GIB) for j in shares])
    result = apply_plan(db, plan, now=2.0)
    assert len(result.committed) == 2  # 30 + 30 fits 80; the third does not
    assert gpu_rows(db)["GPU-n0-0"] == (60 * GIB, None, 2)
    exclusive = submit(db, gpus=1)
    result = apply_plan(db, Plan(placements=[Placement(exclusive, "n0", ("GPU-n0-0",))]), now=3.0)
    assert result.committed == []


def test_partial_placement_is_rolled_back_whole(db: Database) -> None:
    blocker, gang = submit(db, gpus=1), submit(db, gpus=2)
    apply_plan(db, Plan(placements=[Placement(blocker, "n0", ("GPU-n0-1",))]), now=2.0)
    result = apply_plan(db, Plan(placements=[Placement(gang, "n0", ("GPU-n0-0", "GPU-n0-1"))]), 3.0)
    assert result.committed == []
    assert gpu_rows(db)["GPU-n0-0"] == (0, None, 0)  # the first GPU was not kept


def test_database_refuses_over_allocation_even_without_the_applier(db: Database) -> None:
    with pytest.raises(IntegrityError), db.write() as s:
        gpu = s.get(GpuRow, "GPU-n0-0")
        assert gpu is not None
        gpu.used_memory = gpu.memory_total + 1


def test_racing_appliers_never_double_book(db_url: str) -> None:
    """Many threads, each with its own engine, apply conflicting plans at once."""
    setup = Database.open(db_url)
    with setup.write() as s:
        inv_store.register_node(s, node(2), now=0.0)
    jobs = [submit(setup, gpus=1) for _ in range(12)]
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        db = Database.open(db_url, migrate=False)
        try:
            barrier.wait()
            for i, job_id in enumerate(jobs[offset::6]):
                uuid = f"GPU-n0-{(i + offset) % 2}"
                apply_plan(db, Plan(placements=[Placement(job_id, "n0", (uuid,))]), now=2.0)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with setup.read() as s:
        allocated = job_store.list_jobs(s, states=[JobState.ALLOCATED])
    assert len(allocated) == 2  # exactly one job per GPU
    holders = {j.gpu_uuids[0]: j.id for j in allocated}
    assert set(holders) == {"GPU-n0-0", "GPU-n0-1"}
    rows = gpu_rows(setup)
    assert {rows[u][1] for u in holders} == set(holders.values())
    setup.close()


def test_requeue_keeps_submit_time_and_counts_attempts(db: Database) -> None:
    job_id = submit(db, gpus=1, retries=1)
    apply_plan(db, Plan(placements=[Placement(job_id, "n0", ("GPU-n0-0",))]), now=2.0)
    with db.write() as s:
        job_store.transition(s, job_id, JobState.ALLOCATED, JobState.STARTING, 3.0)
        job_store.transition(s, job_id, JobState.STARTING, JobState.RUNNING, 4.0)
        job_store.transition(s, job_id, JobState.RUNNING, JobState.PENDING, 5.0, "lost; retry")
    with db.read() as s:
        job = job_store.get_job(s, job_id)
    assert job is not None
    assert (job.state, job.attempt, job.submitted_at) == (JobState.PENDING, 1, 1.0)
    assert gpu_rows(db)["GPU-n0-0"] == (0, None, 0)


def test_rediscovery_keeps_allocations_and_marks_vanished_busy_gpus_missing(db: Database) -> None:
    job_id = submit(db, gpus=1)
    apply_plan(db, Plan(placements=[Placement(job_id, "n0", ("GPU-n0-3",))]), now=2.0)
    with db.write() as s:
        inv_store.register_node(s, node(2), now=3.0)  # GPUs 2 and 3 vanished
    with db.read() as s:
        gpus = {g.uuid: g for g in inv_store.list_gpus(s)}
    assert "GPU-n0-2" not in gpus  # idle: dropped
    assert gpus["GPU-n0-3"].health.value == "missing" and gpus["GPU-n0-3"].exclusive_job == job_id


def test_models_and_migrations_agree(db_url: str) -> None:
    """Alembic autogenerate finds nothing to add: the migrations build the models' schema."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from gpudock.store.models import Base

    database = Database.open(db_url)
    with database.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    database.close()
    assert diff == []


def test_preemption_request_is_conditional_and_requeues_keeping_submit_time(
    db: Database,
) -> None:
    from gpudock.scheduler.snapshot import Preemption
    from gpudock.store.snapshot import load_snapshot

    victim = submit(db, gpus=1)
    guarded = submit(db, gpus=1, preemptible=False)
    apply_plan(
        db,
        Plan(
            placements=[
                Placement(victim, "n0", ("GPU-n0-0",)),
                Placement(guarded, "n0", ("GPU-n0-1",)),
            ]
        ),
        now=2.0,
    )
    plan = Plan(
        preemptions=[
            Preemption(victim, 99, "job 99 (priority 100)"),
            Preemption(guarded, 99, "job 99 (priority 100)"),
        ]
    )
    assert apply_plan(db, plan, now=3.0).preempted == [victim]
    assert apply_plan(db, plan, now=3.5).preempted == []  # already stopping
    with db.read() as s:
        running = {r.id: r for r in load_snapshot(s, now=4.0).running}
    assert running[victim].stopping and not running[guarded].stopping
    assert running[guarded].preemptible is False
    with db.write() as s:
        job_store.transition(s, victim, JobState.ALLOCATED, JobState.PENDING, 5.0, "preempted")
    with db.read() as s:
        job = job_store.get_job(s, victim)
    assert job is not None and (job.state, job.submitted_at, job.attempt) == (
        JobState.PENDING,
        1.0,
        1,
    )


def test_ids_no_row_can_have_are_simply_not_found(db: Database) -> None:
    """Never a database error (int32 ids on PostgreSQL, int64 on SQLite)."""
    submit(db)
    with db.read() as s:
        for job_id in (0, -1, 2**31, 2**63, 10**20):
            assert job_store.get_job(s, job_id) is None


def test_filters_holding_nul_match_nothing(db: Database) -> None:
    submit(db)
    with db.read() as s:
        assert job_store.list_jobs(s, queue="default\x00") == []
        assert job_store.list_jobs(s, user="alice\x00") == []
        assert len(job_store.list_jobs(s, user="alice")) == 1


def test_a_stored_spec_that_todays_rules_refuse_still_loads(db: Database) -> None:
    """A job accepted under looser rules stays readable: listing never fails on it."""
    job_id = submit(db)
    with db.write() as s:
        row = s.get(JobRow, job_id)
        assert row is not None
        row.spec = {**row.spec, "queue": "default\n"}
    with db.read() as s:
        job = job_store.get_job(s, job_id)
        listed = job_store.list_jobs(s)
    assert job is not None and job.spec.queue == "default\n"
    assert [j.id for j in listed] == [job_id]


def test_a_write_transaction_opened_inside_another_is_refused_at_once(db: Database) -> None:
    with db.write(), pytest.raises(RuntimeError, match="never nest"), db.write():
        pass
    assert submit(db) > 0  # the guard let go: the next write works


def test_many_concurrent_writers_all_commit(db: Database) -> None:
    """64 threads each insert 5 jobs at once: they take turns, and every insert commits."""
    errors: list[BaseException] = []

    def writer() -> None:
        for _ in range(5):
            try:
                submit(db)
            except BaseException as exc:  # reported below
                errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    with db.read() as s:
        assert s.query(JobRow).count() == 320
