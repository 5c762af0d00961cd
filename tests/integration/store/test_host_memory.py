"""Host memory in the store, on real SQLite and PostgreSQL.

A node's memory is stored beside its CPU cores (``nodes.memory``, migration
0011) from the traits the server registers it with, so every snapshot built
from the store (after a restart too) counts it; the memory jobs hold is
summed from their stored specs (``spec.memory``), as large sizes too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect, text

from gpudock.core.inventory import GpuInfo, NodeInventory, NodeTraits
from gpudock.core.job import JobSpec, JobState
from gpudock.scheduler.snapshot import Placement, Plan
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.applier import apply_plan
from gpudock.store.db import _MIGRATIONS, Database
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
        inv_store.register_node(s, inventory("n0"), 0.0, NodeTraits(memory=1024 * GIB))
        inv_store.register_node(s, inventory("n1"), now=0.0)  # counts no memory
    yield database
    database.close()


def submit(db: Database, **spec: object) -> int:
    with db.write() as s:
        return job_store.insert_job(
            s, JobSpec.model_validate({"image": "img", "gpus": 1, **spec}), "al", 1.0
        ).id


def test_nodes_count_their_stored_memory_and_what_their_jobs_hold(db: Database) -> None:
    big = submit(db, memory="600GiB")  # above 2**31 bytes many times over
    small = submit(db, memory="1GiB")
    none = submit(db)
    ended = submit(db, memory="7GiB")
    other = submit(db, memory="2GiB")
    waiting = submit(db, memory="3GiB")
    plan = Plan(
        placements=[
            Placement(big, "n0", ("GPU-n0-0",)),
            Placement(small, "n0", ("GPU-n0-1",)),
            Placement(none, "n0", ("GPU-n0-2",)),
            Placement(ended, "n0", ("GPU-n0-3",)),
            Placement(other, "n1", ("GPU-n1-0",)),
        ]
    )
    assert len(apply_plan(db, plan, now=2.0).committed) == 5
    with db.write() as s:
        assert job_store.transition(s, ended, JobState.ALLOCATED, JobState.FAILED, 3.0, "x")

    with db.read() as s:
        views = {v.name: v for v in load_nodes(s)}
        snapshot = load_snapshot(s, 4.0)
        listed = {n.name: n for n in inv_store.list_nodes(s)}
    assert (views["n0"].host_memory, views["n0"].used_host_memory) == (1024 * GIB, 601 * GIB)
    assert (views["n1"].host_memory, views["n1"].used_host_memory) == (None, 0)
    assert [(j.id, j.memory) for j in snapshot.pending] == [(waiting, 3 * GIB)]
    assert {r.id: r.memory for r in snapshot.running} == {
        big: 600 * GIB,
        small: GIB,
        none: None,
        other: 2 * GIB,
    }
    assert (listed["n0"].memory, listed["n0"].memory_used) == (1024 * GIB, 601 * GIB)
    assert (listed["n1"].memory, listed["n1"].memory_used) == (None, 2 * GIB)


def test_a_restart_registers_the_node_memory_anew_and_no_traits_keep_it(db: Database) -> None:
    with db.write() as s:
        inv_store.register_node(s, inventory("n0"), 5.0)  # no traits: the stored ones stay
    with db.read() as s:
        assert {v.name: v.host_memory for v in load_nodes(s)} == {"n0": 1024 * GIB, "n1": None}
    with db.write() as s:
        inv_store.register_node(s, inventory("n0"), 6.0, NodeTraits(cpus=8.0, memory=64 * GIB))
        inv_store.register_node(s, inventory("n1"), 6.0, NodeTraits(memory=32 * GIB))
    with db.read() as s:
        views = {v.name: (v.cpus, v.host_memory) for v in load_nodes(s)}
    assert views == {"n0": (8.0, 64 * GIB), "n1": (None, 32 * GIB)}


def alembic_config(conn: object) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.attributes["connection"] = conn
    return cfg


def test_migration_0011_adds_node_memory_and_its_downgrade_keeps_every_row(db: Database) -> None:
    job = submit(db, memory="1GiB")
    assert apply_plan(db, Plan(placements=[Placement(job, "n0", ("GPU-n0-0",))]), 2.0).committed
    counts = "SELECT (SELECT count(*) FROM nodes), (SELECT count(*) FROM gpus), " + (
        "(SELECT count(*) FROM jobs), (SELECT count(*) FROM job_events)"
    )
    with db.engine.connect() as conn:
        before = tuple(conn.execute(text(counts)).one())
    with db.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "0010")
    with db.engine.connect() as conn:
        assert "memory" not in {c["name"] for c in inspect(conn).get_columns("nodes")}
        assert tuple(conn.execute(text(counts)).one()) == before  # no cascade to gpus, events
    db.migrate()
    with db.read() as s:
        views = {v.name: v for v in load_nodes(s)}
    assert views["n0"].host_memory is None  # counted again once the server registers it
    assert len(views["n0"].gpus) == 4
    with db.engine.connect() as conn:
        assert tuple(conn.execute(text(counts)).one()) == before
