"""A cycle's window of pending jobs never hides GPU jobs behind a CPU-only backlog
(real SQLite and PostgreSQL): beyond the first ``limit`` jobs in the scheduler's
order, the snapshot also carries the first ``gpu_share`` that ask for GPUs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpudock.core.job import JobSpec, PendingReason
from gpudock.store import job_controls as control_store
from gpudock.store import jobs as job_store
from gpudock.store.db import Database
from gpudock.store.snapshot import load_snapshot


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database.open(db_url)
    yield database
    database.close()


def submit(db: Database, at: float, gpus: int = 0, priority: int = 0) -> int:
    spec = JobSpec(image="img", gpus=gpus, priority=priority)
    with db.write() as session:
        return job_store.insert_job(session, spec, "al", at).id


def window(db: Database, limit: int | None, gpu_share: int) -> list[int]:
    with db.read() as session:
        return [j.id for j in load_snapshot(session, 10.0, limit, gpu_share).pending]


def test_gpu_jobs_behind_a_full_window_of_cpu_jobs_are_still_considered(db: Database) -> None:
    cpu = [submit(db, at=float(i)) for i in range(4)]
    first_gpu, held_gpu, second_gpu, third_gpu = (submit(db, at=5.0 + i, gpus=1) for i in range(4))
    urgent_cpu = submit(db, at=20.0, priority=5)  # first in the scheduler's order
    with db.write() as session:
        control_store.hold(session, held_gpu, "al", 9.0, PendingReason("hold", "held by al"))

    # the prefix in order, then the GPU jobs further back (not the held one), in order
    assert window(db, 3, gpu_share=2) == [urgent_cpu, cpu[0], cpu[1], first_gpu, second_gpu]
    assert window(db, 3, gpu_share=0) == [urgent_cpu, cpu[0], cpu[1]]
    assert window(db, 3, gpu_share=9) == [urgent_cpu, *cpu[:2], first_gpu, second_gpu, third_gpu]


def test_a_window_that_holds_every_pending_job_adds_nothing(db: Database) -> None:
    jobs = [submit(db, at=0.0), submit(db, at=1.0, gpus=1), submit(db, at=2.0)]
    assert window(db, 5, gpu_share=5) == jobs
    assert window(db, None, gpu_share=5) == jobs
