"""Node labels, taints, CPUs and GPU topology, and job placement constraints, from the
store into the scheduler's snapshot, on real SQLite and PostgreSQL; and migration 0003."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import JSON, bindparam, event, text
from sqlalchemy.exc import IntegrityError

from gpudock.core.affinity import Taint, Toleration
from gpudock.core.inventory import GpuInfo, NodeInventory, NodeTraits
from gpudock.core.job import JobSpec, JobState
from gpudock.scheduler.snapshot import JobRequest, NodeView, Placement, Plan
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.applier import apply_plan
from gpudock.store.db import Database
from gpudock.store.snapshot import load_nodes, load_snapshot

GIB = 1024**3
TRAITS = NodeTraits(
    labels={"zone": "b", "gpu.family": "hopper"},
    taints=("reserved=training:NoSchedule", "spot:NoSchedule"),
    cpus=32.0,
)


def node(
    name: str = "n0", topology: list[tuple[int | None, int | None]] | None = None
) -> NodeInventory:
    topology = topology or [(0, 0), (0, 0), (1, 0), (1, 0)]
    gpus = tuple(
        GpuInfo(
            index=i, uuid=f"GPU-{name}-{i}", name="NVIDIA H100", memory_total=80 * GIB,
            numa=numa, nvlink=nvlink,
        )
        for i, (numa, nvlink) in enumerate(topology)
    )  # fmt: skip
    return NodeInventory(name=name, gpus=gpus, source="emulated")


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database.open(db_url)
    with database.write() as s:
        inv_store.register_node(s, node(), now=0.0, traits=TRAITS)
    yield database
    database.close()


def submit(db: Database, **spec: object) -> int:
    with db.write() as s:
        return job_store.insert_job(
            s, JobSpec.model_validate({"image": "img", **spec}), "al", 1.0
        ).id


def nodes(db: Database) -> dict[str, NodeView]:
    with db.read() as s:
        return {n.name: n for n in load_nodes(s)}


def test_registration_stores_traits_and_gpu_topology(db: Database) -> None:
    view = nodes(db)["n0"]

    assert view.labels == (("gpu.family", "hopper"), ("zone", "b"))
    assert view.taints == (Taint("reserved", "training"), Taint("spot"))
    assert (view.cpus, view.used_cpus) == (32.0, 0.0)
    assert [(g.numa, g.nvlink) for g in view.gpus] == [(0, 0), (0, 0), (1, 0), (1, 0)]


def test_reregistration_replaces_traits_and_topology_or_keeps_traits_when_not_given(
    db: Database,
) -> None:
    with db.write() as s:
        inv_store.register_node(s, node(topology=[(None, None)] * 4), now=1.0)
    kept = nodes(db)["n0"]
    assert (kept.labels, kept.cpus) == ((("gpu.family", "hopper"), ("zone", "b")), 32.0)
    assert [(g.numa, g.nvlink) for g in kept.gpus] == [(None, None)] * 4

    with db.write() as s:
        inv_store.register_node(s, node(), now=2.0, traits=NodeTraits())
    cleared = nodes(db)["n0"]
    assert (cleared.labels, cleared.taints, cleared.cpus) == ((), (), None)


def test_used_cpus_sums_the_jobs_holding_resources_on_each_node(db: Database) -> None:
    with db.write() as s:
        inv_store.register_node(s, node("n1"), now=0.0)
    running = submit(db, gpus=1, cpus=4)
    allocated = submit(db, gpus=1, cpus=2.5)
    no_cpus = submit(db, gpus=1)
    elsewhere = submit(db, gpus=1, cpus=8)
    finished = submit(db, gpus=1, cpus=16)
    submit(db, gpus=1, cpus=64)  # pending: holds nothing
    plan = Plan(
        placements=[
            Placement(running, "n0", ("GPU-n0-0",)),
            Placement(allocated, "n0", ("GPU-n0-1",)),
            Placement(no_cpus, "n0", ("GPU-n0-2",)),
            Placement(elsewhere, "n1", ("GPU-n1-0",)),
            Placement(finished, "n0", ("GPU-n0-3",)),
        ]
    )
    assert len(apply_plan(db, plan, now=2.0).committed) == 5
    with db.write() as s:
        assert job_store.transition(s, running, JobState.ALLOCATED, JobState.STARTING, 3.0)
        assert job_store.transition(s, running, JobState.STARTING, JobState.RUNNING, 3.0)
        assert job_store.transition(s, finished, JobState.ALLOCATED, JobState.FAILED, 3.0, "x")

    views = nodes(db)
    assert (views["n0"].used_cpus, views["n1"].used_cpus) == (6.5, 8.0)
    with db.read() as s:
        listed = {n.name: n for n in inv_store.list_nodes(s)}
    assert (listed["n0"].cpus, listed["n0"].cpus_used, listed["n1"].cpus_used) == (32.0, 6.5, 8.0)


def test_pending_jobs_carry_their_constraints_into_the_snapshot(db: Database) -> None:
    constrained = submit(
        db,
        gpus=4,
        node_selector={"zone": "b", "gpu.family": "hopper"},
        tolerations=["spot", "reserved=training:NoSchedule", "*"],
        topology="nvlink",
    )
    plain = submit(db, gpus=1)

    with db.read() as s:
        pending = {j.id: j for j in load_snapshot(s, now=5.0).pending}
        stored = job_store.get_job(s, constrained)

    assert pending[constrained] == JobRequest(
        id=constrained,
        gpus=4,
        submitted_at=1.0,
        user="al",
        can_preempt=False,  # no preempting priority class
        node_selector=(("gpu.family", "hopper"), ("zone", "b")),
        tolerations=(
            Toleration("spot"),
            Toleration("reserved", "training", "NoSchedule"),
            Toleration("*"),
        ),
        topology="nvlink",
    )
    assert (pending[plain].node_selector, pending[plain].tolerations, pending[plain].topology) == (
        (),
        (),
        None,
    )
    assert stored is not None and stored.spec.topology == "nvlink"
    assert stored.spec.tolerations == ["spot", "reserved=training:NoSchedule", "*"]


def test_the_snapshot_takes_a_fixed_number_of_queries(db: Database) -> None:
    for name in ("n1", "n2", "n3"):
        with db.write() as s:
            inv_store.register_node(s, node(name), now=0.0, traits=TRAITS)
    for _ in range(5):
        submit(db, gpus=1, cpus=1, tolerations=["spot"], node_selector={"zone": "b"})
    apply_plan(db, Plan(placements=[Placement(1, "n1", ("GPU-n1-0",))]), now=2.0)
    statements: list[str] = []

    def count(*args: object) -> None:
        statements.append(str(args[2]))

    event.listen(db.engine, "before_cursor_execute", count)
    try:
        with db.read() as s:
            load_snapshot(s, now=3.0)
    finally:
        event.remove(db.engine, "before_cursor_execute", count)
    selects = [q for q in statements if q.lstrip().upper().startswith("SELECT")]
    # gpus, MIG devices, cpus and memory per node, nodes, pending, allocations, running
    assert len(selects) == 8


def test_upgrade_from_0002_keeps_rows_and_fills_defaults(db_url: str) -> None:
    database = Database.open(db_url, migrate=False)
    database.migrate("0002")
    with database.engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO nodes (name, status, gpu_source, last_seen, labels) "
                "VALUES ('old', 'available', 'nvml', 0, '{\"zone\": \"a\"}')"
            )
        )
        conn.execute(
            text(
                'INSERT INTO gpus (uuid, node, "index", name, memory_total, emulated, health, '
                "used_memory, exclusive_job, shared_jobs, version) "
                "VALUES ('GPU-old', 'old', 0, 'NVIDIA H100', :mem, false, 'ok', :mem, 1, 0, 0)"
            ).bindparams(mem=80 * GIB)
        )
        insert_job = text(
            'INSERT INTO jobs (id, "user", queue, priority, spec, gpus, state, attempt, version, '
            "submitted_at, node, cpus, gpu_uuids, pending_reasons) VALUES (:id, 'al', 'default', "
            "0, :spec, 1, :state, 0, 0, 1.0, :node, 3.0, :uuids, :reasons)"
        ).bindparams(
            bindparam("spec", {"image": "img", "gpus": 1, "cpus": 3.0}, type_=JSON),
            bindparam("uuids", type_=JSON),
            bindparam("reasons", [], type_=JSON),
        )
        conn.execute(
            insert_job,
            [
                {"id": 1, "state": "RUNNING", "node": "old", "uuids": ["GPU-old"]},
                {"id": 2, "state": "PENDING", "node": None, "uuids": None},
            ],
        )
        conn.execute(
            text(
                "INSERT INTO job_events (job_id, at, attempt, from_state, to_state) "
                "VALUES (1, 1.0, 0, '', 'PENDING'), (2, 1.0, 0, '', 'PENDING')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO allocations (job_id, node, gpu_uuid, created_at) "
                "VALUES (1, 'old', 'GPU-old', 1.0)"
            )
        )

    database.migrate()  # only ADD COLUMNs: no table is rebuilt, no row cascades away

    with database.read() as s:
        (old,) = load_nodes(s)
        snapshot = load_snapshot(s, now=2.0)
        job = job_store.get_job(s, 2)
    assert (old.labels, old.taints, old.cpus, old.used_cpus) == ((("zone", "a"),), (), None, 3.0)
    assert [(g.numa, g.nvlink, g.exclusive) for g in old.gpus] == [(None, None, True)]
    (pending,) = snapshot.pending
    assert (pending.id, pending.node_selector, pending.tolerations, pending.topology) == (
        2,
        (),
        (),
        None,
    )
    assert job is not None and (job.spec.node_selector, job.spec.tolerations) == ({}, [])
    with database.engine.connect() as conn:
        counts = [
            conn.execute(text(f"SELECT count(*) FROM {table}")).scalar()
            for table in ("job_events", "allocations")
        ]
    assert counts == [2, 1]
    with pytest.raises(IntegrityError), database.write() as s:  # CHECKs on gpus still hold
        s.execute(text("UPDATE gpus SET used_memory = -1"))
    database.close()


def test_downgrade_to_0002_and_back_keeps_rows(db: Database) -> None:
    from alembic import command
    from alembic.config import Config

    from gpudock.store.db import _MIGRATIONS

    job_id = submit(db, gpus=1, tolerations=["spot"])
    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0002")

    db.migrate()

    view = nodes(db)["n0"]
    assert (view.taints, view.cpus, [g.numa for g in view.gpus]) == ((), None, [None] * 4)
    with db.read() as s:
        events = job_store.job_events(s, job_id)
        (pending,) = load_snapshot(s, now=2.0).pending
    assert [e["to"] for e in events] == ["PENDING"]
    assert pending.tolerations == (Toleration("spot"),)  # copied back from the stored spec
