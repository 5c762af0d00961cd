"""Elastic jobs in the store, on real SQLite and PostgreSQL: the snapshot carries their
range (from the stored spec), and a Plan's resize stops the job, records ``job.resized``
and leaves its retries alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpudock.core.events import EventType
from gpudock.core.inventory import GpuInfo, NodeInventory
from gpudock.core.job import JobSpec, JobState
from gpudock.scheduler.snapshot import Placement, Plan, Resize
from gpudock.store import events as event_store
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.applier import apply_plan
from gpudock.store.db import Database
from gpudock.store.snapshot import load_snapshot

GIB = 1024**3


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database.open(db_url)
    gpus = tuple(
        GpuInfo(index=i, uuid=f"GPU-{i}", name="NVIDIA H100", memory_total=80 * GIB)
        for i in range(4)
    )
    with database.write() as s:
        inv_store.register_node(s, NodeInventory(name="n0", gpus=gpus, source="emulated"), 0.0)
    yield database
    database.close()


def submit(db: Database, **spec: object) -> int:
    with db.write() as s:
        return job_store.insert_job(s, JobSpec.model_validate({"image": "img", **spec}), "al", 1).id


def test_a_pending_elastic_job_carries_its_range_and_a_fixed_one_none(db: Database) -> None:
    elastic, fixed = submit(db, gpus="2-4"), submit(db, gpus=2)
    with db.read() as s:
        pending = {r.id: r for r in load_snapshot(s, now=2.0).pending}
    assert (pending[elastic].gpus, pending[elastic].max_gpus) == (2, 4)
    assert pending[fixed].max_gpus is None


def test_a_running_job_is_resizable_only_with_elastic_restart(db: Database) -> None:
    restart = submit(db, min_gpus=1, max_gpus=3, elastic="restart")
    start_only = submit(db, gpus="1-3")
    plan = Plan(
        placements=[
            Placement(restart, "n0", ("GPU-0",)),
            Placement(start_only, "n0", ("GPU-1",)),
        ]
    )
    assert len(apply_plan(db, plan, now=2.0).committed) == 2
    with db.read() as s:
        running = {r.id: r for r in load_snapshot(s, now=3.0).running}
    assert running[restart].elastic == (1, 3)
    assert running[start_only].elastic is None


def test_a_resize_stops_the_job_and_records_from_and_to(db: Database) -> None:
    job_id = submit(db, gpus="2-4", elastic="restart", retries=0)
    apply_plan(db, Plan(placements=[Placement(job_id, "n0", ("GPU-0", "GPU-1"))]), now=2.0)
    result = apply_plan(db, Plan(resizes=[Resize(job_id, "n0", 2, 4)]), now=3.0)
    assert result.resized == [job_id]
    again = apply_plan(db, Plan(resizes=[Resize(job_id, "n0", 2, 4)]), now=4.0)
    assert again.resized == []  # already stopping: the first flag wins
    with db.read() as s:
        job = job_store.get_job(s, job_id)
        events = event_store.list_events(s, job_id=job_id, types=[EventType.JOB_RESIZED])
    assert job is not None and job.state is JobState.ALLOCATED
    assert (job.stop_requested, job.stop_requested_by) == (
        "resize",
        "the scheduler, to grow from 2 to 4 GPUs",
    )
    assert [(e.payload, e.node) for e in events] == [({"from": 2, "to": 4}, "n0")]
