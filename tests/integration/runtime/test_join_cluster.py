"""A follower's view of the store (``server.join_cluster``): nothing written, and nothing
served until the schema is at its code's revision.

A ``--standby`` on PostgreSQL serves the API while another server leads. It must
not do the leader's start-up work (migrate, register nodes, make tokens): that
would race the leader, and a follower registering its host would mark the
leader's node unavailable. It waits while the schema is behind (the leader is
still migrating, or runs older code) or has no installation yet.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from gpudock.config import ServerConfig
from gpudock.server import join_cluster, open_cluster
from gpudock.store.db import Database

GPUS = "2xH100-80GB"


def counts(url: str) -> dict[str, int]:
    """Rows per table (an empty store: none)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                table: int(conn.execute(text(f'SELECT count(*) FROM "{table}"')).scalar_one())
                for table in inspect(conn).get_table_names()
            }
    finally:
        engine.dispose()


def test_a_follower_joins_an_empty_database_only_once_the_leader_has_set_it_up(
    tmp_path: Path, db_url: str
) -> None:
    config = ServerConfig(node_name="gpu-a")
    assert join_cluster(tmp_path / "follower", config, db_url, GPUS) is None
    assert counts(db_url) == {}, "the follower created tables"
    leader = open_cluster(tmp_path / "leader", config, db_url=db_url, emulate_gpus=GPUS)
    try:
        before = counts(db_url)
        joined = join_cluster(tmp_path / "follower", config, db_url, GPUS)
        assert joined is not None
        try:
            assert (joined.instance_id, joined.node_name, joined.cluster_version) == (
                leader.instance_id,
                leader.node_name,
                leader.cluster_version,
            )
            assert joined.new_admin_token is None
            assert counts(db_url) == before, "the follower wrote to the store"
        finally:
            joined.db.close()
    finally:
        leader.db.close()


def test_a_follower_serves_nothing_on_a_schema_behind_its_code(tmp_path: Path, db_url: str) -> None:
    older = Database.open(db_url, migrate=False)
    try:
        older.migrate("0014")
        assert not older.at_head()
    finally:
        older.close()
    assert join_cluster(tmp_path, ServerConfig(node_name="gpu-a"), db_url, GPUS) is None


@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_a_follower_on_another_host_does_not_disown_the_leaders_node(
    tmp_path: Path, db_url: str
) -> None:
    leader = open_cluster(
        tmp_path / "a", ServerConfig(node_name="gpu-a"), db_url=db_url, emulate_gpus=GPUS
    )
    try:
        joined = join_cluster(tmp_path / "b", ServerConfig(node_name="gpu-b"), db_url, GPUS)
        assert joined is not None
        joined.db.close()
        with leader.db.read() as session:
            rows = session.execute(text("SELECT name, status FROM nodes")).all()
        assert [(name, status) for name, status in rows] == [("gpu-a", "available")]
    finally:
        leader.db.close()
