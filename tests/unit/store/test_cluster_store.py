"""Swarm nodes in the store (``store/cluster.py``): engine facts and agent reports together."""

from __future__ import annotations

from pathlib import Path

from gpudock.core.cluster import EngineNode
from gpudock.core.inventory import GpuHealth, GpuInfo, NodeInventory
from gpudock.store import cluster as cluster_store
from gpudock.store.db import Database
from gpudock.store.models import GpuRow, NodeRow

GIB = 1024**3


def _engine(state: str = "ready") -> EngineNode:
    return EngineNode(
        engine_id="abc123",
        name="sw1",
        hostname="host",
        state=state,
        availability="active",
        manager=False,
        labels={"rack": "a"},
        engine_labels={"gpudock.gpu.model": "Tesla T4", "gpudock.gpu.memory": "16GiB"},
        gpus=("GPU-1", "GPU-2"),
        cpus=8.0,
        memory=32 * GIB,
    )


def _agent_report() -> NodeInventory:
    gpus = tuple(
        GpuInfo(index=i, uuid=u, name="NVIDIA H100 80GB HBM3", memory_total=80 * GIB)
        for i, u in enumerate(("GPU-1", "GPU-2"))
    )
    return NodeInventory("sw1", gpus, driver_version="550.54.15", cuda_version="12.4")


def test_without_an_agent_the_engine_labels_describe_the_gpus(tmp_path: Path) -> None:
    db = Database.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with db.write() as session:
        synced = cluster_store.sync_engine_node(session, _engine(), None, 1.0)
    assert synced.new
    with db.read() as session:
        row = session.get(NodeRow, "sw1")
        assert row is not None
        assert (row.engine_id, row.gpu_source, row.labels) == ("abc123", "swarm", {"rack": "a"})
        gpus = session.query(GpuRow).filter(GpuRow.node == "sw1").order_by(GpuRow.index).all()
        assert [(g.uuid, g.name, g.memory_total) for g in gpus] == [
            ("GPU-1", "Tesla T4", 16 * GIB),
            ("GPU-2", "Tesla T4", 16 * GIB),
        ]


def test_an_engine_refresh_keeps_what_the_agent_reported(tmp_path: Path) -> None:
    db = Database.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with db.write() as session:
        cluster_store.sync_engine_node(session, _engine(), None, 1.0)
        assert cluster_store.apply_agent_inventory(session, "sw1", _agent_report(), 2.0)
        assert not cluster_store.apply_agent_inventory(session, "sw1", _agent_report(), 3.0)
    with db.write() as session:  # a node event: Swarm's view again
        cluster_store.sync_engine_node(session, _engine(state="down"), None, 4.0)
    with db.read() as session:
        row = session.get(NodeRow, "sw1")
        assert row is not None
        assert (row.gpu_source, row.driver_version, row.cuda_version) == (
            "agent",
            "550.54.15",
            "12.4",
        )
        assert (row.engine_state, row.down_since) == ("down", 4.0)
        names = {g.name for g in session.query(GpuRow).filter(GpuRow.node == "sw1")}
        assert names == {"NVIDIA H100 80GB HBM3"}
        assert {g.health for g in session.query(GpuRow)} == {GpuHealth.OK.value}
