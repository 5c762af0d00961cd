"""A multi-node gang in the store, on real SQLite and PostgreSQL: committed whole or not at
all, one running entry per node, its CPUs counted on each node, and cleared on requeue."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpudock.core.inventory import GpuInfo, NodeInventory, NodeTraits
from gpudock.core.job import JobPart, JobSpec, JobState
from gpudock.scheduler.snapshot import GangPlacement, Placement, Plan
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.applier import apply_plan
from gpudock.store.db import Database
from gpudock.store.snapshot import load_snapshot

GIB = 1024**3


def node(name: str) -> NodeInventory:
    gpus = tuple(
        GpuInfo(index=i, uuid=f"GPU-{name}-{i}", name="NVIDIA H100", memory_total=80 * GIB)
        for i in range(2)
    )
    return NodeInventory(name=name, gpus=gpus, source="emulated")


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database.open(db_url)
    with database.write() as s:
        for name in ("a", "b", "c"):
            inv_store.register_node(s, node(name), 0.0, NodeTraits(cpus=16.0))
    yield database
    database.close()


def gang(db: Database, job_id: int, nodes: tuple[str, ...]) -> Plan:
    parts = tuple(Placement(job_id, n, (f"GPU-{n}-0",)) for n in nodes)
    return Plan(gangs=[GangPlacement(job_id, parts)])


def submit(db: Database) -> int:
    spec = JobSpec.model_validate({"image": "img", "gpus": 1, "nodes": 2, "cpus": 3})
    with db.write() as s:
        return job_store.insert_job(s, spec, "al", 1.0).id


def test_a_gang_is_committed_whole_with_its_parts_in_rank_order(db: Database) -> None:
    job_id = submit(db)
    result = apply_plan(db, gang(db, job_id, ("c", "a")), 2.0)
    assert result.started == [job_id] and not result.rejected
    with db.read() as s:
        job = job_store.get_job(s, job_id)
        snapshot = load_snapshot(s, 3.0)
        cpus = inv_store.used_cpus_by_node(s)
    assert job is not None and job.state is JobState.ALLOCATED
    assert job.gang == (JobPart("c", ("GPU-c-0",)), JobPart("a", ("GPU-a-0",)))
    assert job.node == "c" and job.gpu_uuids == ("GPU-c-0", "GPU-a-0")
    assert [p.node for p in job.placement] == ["c", "a"] and job.on_node("a")
    running = [(r.id, r.node, r.gpu_uuids) for r in snapshot.running]
    assert running == [(job_id, "c", ("GPU-c-0",)), (job_id, "a", ("GPU-a-0",))]
    assert cpus == {"a": 3.0, "c": 3.0}  # a gang's CPUs count on each of its nodes
    taken = {g.uuid for n in snapshot.nodes for g in n.gpus if g.exclusive}
    assert taken == {"GPU-c-0", "GPU-a-0"}


def test_a_gang_with_one_gpu_taken_is_rejected_and_holds_nothing(db: Database) -> None:
    first, second = submit(db), submit(db)
    apply_plan(db, gang(db, first, ("a", "b")), 2.0)
    result = apply_plan(db, gang(db, second, ("c", "b")), 3.0)  # GPU-b-0 is first's
    assert not result.committed_gangs and result.rejected
    with db.read() as s:
        job = job_store.get_job(s, second)
        snapshot = load_snapshot(s, 4.0)
    assert job is not None and job.state is JobState.PENDING and job.gang == ()
    assert not any(g.exclusive for n in snapshot.nodes if n.name == "c" for g in n.gpus)


def test_a_requeued_gang_frees_every_part_and_forgets_them(db: Database) -> None:
    job_id = submit(db)
    apply_plan(db, gang(db, job_id, ("a", "b")), 2.0)
    with db.write() as s:
        assert job_store.transition(s, job_id, JobState.ALLOCATED, JobState.PENDING, 3.0, "lost")
    with db.read() as s:
        job = job_store.get_job(s, job_id)
        snapshot = load_snapshot(s, 4.0)
    assert job is not None and job.gang == () and job.placement == ()
    assert not any(g.exclusive for n in snapshot.nodes for g in n.gpus)
