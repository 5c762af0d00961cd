"""GPU inventory in the store: the share reserve, MIG devices, quarantine and cordon."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import select

from gpudock.core.inventory import GpuHealth, GpuInfo, MigDeviceInfo, NodeInventory, NodeTraits
from gpudock.core.job import JobSpec, JobState
from gpudock.scheduler.snapshot import JobRequest, Placement, Plan
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.applier import apply_plan
from gpudock.store.db import Database
from gpudock.store.models import EventRow
from gpudock.store.snapshot import load_nodes, load_snapshot

GIB, MIB = 1024**3, 1024**2


def inventory(mig_on_gpu1: bool = False, migs: tuple[MigDeviceInfo, ...] = ()) -> NodeInventory:
    gpus = (
        GpuInfo(0, "GPU-0", "NVIDIA H100 80GB HBM3", 80 * GIB, False, brand="nvidia", arch="9.0"),
        GpuInfo(1, "GPU-1", "NVIDIA H100 80GB HBM3", 80 * GIB, mig_mode=mig_on_gpu1),
    )  # fmt: skip
    return NodeInventory("n0", gpus, source="nvml", mig_devices=migs)


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database.open(db_url)
    with database.write() as s:
        inv_store.register_node(s, inventory(), 0.0, NodeTraits(gpu_memory_reserve=512 * MIB))
    yield database
    database.close()


def submit(db: Database, **spec: object) -> int:
    with db.write() as s:
        return job_store.insert_job(s, JobSpec(image="img", **spec), "alice", now=1.0).id  # type: ignore[arg-type]


def place(db: Database, job: int, gpu: str, share: int | None = None) -> bool:
    result = apply_plan(db, Plan(placements=[Placement(job, "n0", (gpu,), share)]), now=2.0)
    return bool(result.committed)


def test_shares_never_take_the_reserve(db: Database) -> None:
    room = 80 * GIB - 512 * MIB
    first = submit(db, gpus=1, gpu_memory=room - GIB)
    assert place(db, first, "GPU-0", room - GIB)
    over = submit(db, gpus=1, gpu_memory=GIB + 1)
    assert not place(db, over, "GPU-0", GIB + 1)  # one byte into the reserve: refused
    exact = submit(db, gpus=1, gpu_memory=GIB)
    assert place(db, exact, "GPU-0", GIB)  # up to the reserve: fits
    whole = submit(db, gpus=1)
    assert not place(db, whole, "GPU-0")  # a GPU holding shares takes no exclusive job
    with db.read() as s:
        [view] = [g for n in load_nodes(s) for g in n.gpus if g.uuid == "GPU-0"]
        gpus = {g.uuid: g for g in inv_store.list_gpus(s)}
    assert (view.memory_total, view.free_memory) == (room, 0)  # what the scheduler sees
    assert (gpus["GPU-0"].memory_total, gpus["GPU-0"].memory_reserved) == (80 * GIB, 512 * MIB)


def test_an_exclusive_gpu_takes_no_share(db: Database) -> None:
    assert place(db, submit(db, gpus=1), "GPU-1")
    assert not place(db, submit(db, gpus=1, gpu_memory=GIB), "GPU-1", GIB)


def test_the_reserve_follows_the_config_at_the_next_start(db: Database) -> None:
    with db.write() as s:
        inv_store.register_node(s, inventory(), 5.0, NodeTraits(gpu_memory_reserve=2 * GIB))
        assert {g.memory_reserved for g in inv_store.list_gpus(s)} == {2 * GIB}
        inv_store.register_node(s, inventory(), 6.0)  # no traits: kept
        assert {g.memory_reserved for g in inv_store.list_gpus(s)} == {2 * GIB}


def test_mig_devices_are_registered_and_their_gpu_takes_no_whole_or_share_job(
    db: Database,
) -> None:
    migs = (
        MigDeviceInfo("MIG-a", "GPU-1", 0, "3g.40gb", 40 * GIB, 1, 0),
        MigDeviceInfo("MIG-b", "GPU-1", 1, "1g.10gb", 10 * GIB, 7, 0),
    )
    with db.write() as s:
        inv_store.register_node(s, inventory(True, migs), 1.0)
    with db.read() as s:
        found = [(m.uuid, m.parent_uuid, m.slot, m.profile) for m in inv_store.list_mig_devices(s)]
        [node] = inv_store.list_nodes(s)
        views = {g.uuid: g for n in load_nodes(s) for g in n.gpus}
    assert found == [("MIG-a", "GPU-1", 0, "3g.40gb"), ("MIG-b", "GPU-1", 1, "1g.10gb")]
    assert [m.uuid for m in node.mig_devices] == ["MIG-a", "MIG-b"]
    assert not views["GPU-1"].healthy and views["GPU-0"].healthy
    assert not place(db, submit(db, gpus=1), "GPU-1")
    assert not place(db, submit(db, gpus=1, gpu_memory=GIB), "GPU-1", GIB)
    with db.write() as s:  # the admin destroyed one instance; discovery sees the other
        inv_store.register_node(s, inventory(True, migs[1:]), 2.0)
        assert [m.uuid for m in inv_store.list_mig_devices(s)] == ["MIG-b"]


def test_quarantine_and_cordon_stick_until_uncordoned(db: Database) -> None:
    with db.write() as s:
        inv_store.set_gpu_health(s, "GPU-0", GpuHealth.QUARANTINED, "XID 48; needs a reset", 3.0)
        inv_store.set_gpu_health(s, "GPU-1", GpuHealth.CORDONED, "cordoned by admin", 3.0)
    assert not place(db, submit(db, gpus=1), "GPU-0")
    with db.write() as s:
        inv_store.register_node(s, inventory(), 4.0)  # a restart: discovery says both are ok
    with db.read() as s:
        gpus = {g.uuid: (g.health, g.health_reason) for g in inv_store.list_gpus(s)}
        moves = [
            e.payload["to"]
            for e in s.scalars(select(EventRow).where(EventRow.type == "gpu.health"))
        ]
    assert gpus == {
        "GPU-0": (GpuHealth.QUARANTINED, "XID 48; needs a reset"),
        "GPU-1": (GpuHealth.CORDONED, "cordoned by admin"),
    }
    assert moves == ["quarantined", "cordoned"]
    with db.write() as s:
        back = inv_store.set_gpu_health(s, "GPU-0", GpuHealth.OK, None, 5.0)
    assert back is not None and (back.health, back.health_reason) == (GpuHealth.OK, None)
    assert place(db, submit(db, gpus=1), "GPU-0")


def place_mig(db: Database, job: int, mig: str) -> bool:
    result = apply_plan(db, Plan(placements=[Placement(job, "n0", (), mig=mig)]), now=2.0)
    return bool(result.committed)


def test_a_mig_device_is_given_once_and_given_back_when_its_job_ends(db: Database) -> None:
    migs = (
        MigDeviceInfo("MIG-a", "GPU-1", 0, "3g.40gb", 40 * GIB, 1, 0),
        MigDeviceInfo("MIG-b", "GPU-1", 1, "1g.10gb", 10 * GIB, 7, 0),
    )
    with db.write() as s:
        inv_store.register_node(s, inventory(True, migs), 1.0)
    first, second = submit(db, mig="1g.10gb"), submit(db, mig="1g.10gb")
    assert place_mig(db, first, "MIG-b")
    assert not place_mig(db, second, "MIG-b")  # the database refuses a double booking
    with db.read() as s:
        job = job_store.get_job(s, first)
        views = {m.uuid: m for n in load_nodes(s) for m in n.migs}
        [running] = load_snapshot(s, 3.0).running
    assert job is not None and (job.state.value, job.gpu_uuids) == ("ALLOCATED", ("MIG-b",))
    assert (views["MIG-b"].held, views["MIG-a"].held) == (True, False)
    assert (running.id, running.gpu_uuids, running.mig) == (first, (), "MIG-b")
    pending = [(r.id, r.gpus, r.mig) for r in load_snapshot_pending(db)]
    assert pending == [(second, 0, "1g.10gb")]  # a MIG job asks for no GPU
    with db.write() as s:
        job_store.transition(s, first, JobState.ALLOCATED, JobState.CANCELLED, 4.0, "cancel")
    assert place_mig(db, second, "MIG-b")  # given back when the job ended


def test_a_mig_device_of_a_quarantined_gpu_is_not_given(db: Database) -> None:
    migs = (MigDeviceInfo("MIG-b", "GPU-1", 1, "1g.10gb", 10 * GIB, 7, 0),)
    with db.write() as s:
        inv_store.register_node(s, inventory(True, migs), 1.0)
        inv_store.set_gpu_health(s, "GPU-1", GpuHealth.QUARANTINED, "XID 79", 2.0)
    with db.read() as s:
        [view] = [m for n in load_nodes(s) for m in n.migs]
    assert not view.healthy
    assert not place_mig(db, submit(db, mig="1g.10gb"), "MIG-b")


def load_snapshot_pending(db: Database) -> list[JobRequest]:
    with db.read() as s:
        return list(load_snapshot(s, 3.0).pending)
