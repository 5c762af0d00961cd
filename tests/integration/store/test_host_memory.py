"""Host memory from the store into the snapshot, on real SQLite and PostgreSQL.

The store keeps no node memory (the caller passes it); the memory jobs hold
is summed from their stored specs (``spec.memory``), as large sizes too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpudock.core.inventory import GpuInfo, NodeInventory
from gpudock.core.job import JobSpec, JobState
from gpudock.scheduler.snapshot import Placement, Plan
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.applier import apply_plan
from gpudock.store.db import Database
from gpudock.store.snapshot import load_nodes, load_snapshot

GIB = 1024**3


def inventory(name: str) -> NodeInventory:
    gpus = tuple(
        GpuInfo(index=i, uuid=f"GPU-{name}-{i}", name="H100", memory_total=80 * GIB)
        for i in range(4)
    )
    return NodeInventory(name=name, gpus=gpus, source="emulated")


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database.open(db_url)
    with database.write() as s:
        inv_store.register_node(s, inventory("n0"), now=0.0)
        inv_store.register_node(s, inventory("n1"), now=0.0)
    yield database
    database.close()


def submit(db: Database, **spec: object) -> int:
    with db.write() as s:
        return job_store.insert_job(
            s, JobSpec.model_validate({"image": "img", "gpus": 1, **spec}), "al", 1.0
        ).id


def test_nodes_count_the_memory_their_jobs_hold(db: Database) -> None:
    big = submit(db, memory="600GiB")  # above 2**31 bytes many times over
    small = submit(db, memory="1GiB")
    none = submit(db)
    ended = submit(db, memory="7GiB")
    waiting = submit(db, memory="3GiB")
    plan = Plan(
        placements=[
            Placement(big, "n0", ("GPU-n0-0",)),
            Placement(small, "n0", ("GPU-n0-1",)),
            Placement(none, "n0", ("GPU-n0-2",)),
            Placement(ended, "n1", ("GPU-n1-0",)),
        ]
    )
    assert len(apply_plan(db, plan, now=2.0).committed) == 4
    with db.write() as s:
        assert job_store.transition(s, ended, JobState.ALLOCATED, JobState.FAILED, 3.0, "x")

    with db.read() as s:
        views = {v.name: v for v in load_nodes(s, {"n0": 1024 * GIB})}
        snapshot = load_snapshot(s, 4.0, host_memory={"n0": 1024 * GIB})
    assert (views["n0"].host_memory, views["n0"].used_host_memory) == (1024 * GIB, 601 * GIB)
    assert (views["n1"].host_memory, views["n1"].used_host_memory) == (None, 0)
    assert [(j.id, j.memory) for j in snapshot.pending] == [(waiting, 3 * GIB)]
    with db.read() as s:
        plain = {v.name: v for v in load_nodes(s)}
    assert plain["n0"].host_memory is None  # no capacity given: memory is not counted
