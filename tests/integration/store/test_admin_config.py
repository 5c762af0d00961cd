"""Live administration on the real store (SQLite and PostgreSQL): an apply is whole or
nothing, persists across a restart, and is recorded in the event log."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from gpudock.cluster_config import ClusterConfig
from gpudock.config import SchedulerConfig, ServerConfig
from gpudock.core.errors import Forbidden, InvalidInput
from gpudock.core.job import JobSpec
from gpudock.server import Server, build_server
from gpudock.services import jobs as jobs_service
from gpudock.services.admin import AdminService, ConfigRefused
from gpudock.services.jobs import JobService
from gpudock.store import events as event_store
from gpudock.store import tokens as token_store
from gpudock.store.models import Base
from gpudock.store.tokens import Principal

ADMIN = Principal(user="admin", is_admin=True)
ALICE = Principal(user="alice", is_admin=False)
FILE_SCHEDULER = {
    "priority_classes": [{"name": "urgent", "value": 100}],
    "queues": {"queues": [{"name": "vision", "guarantee": {"gpus": 1}}]},
}


@pytest.fixture
def server(tmp_path: Path, db_url: str) -> Iterator[Server]:
    """In-process, nothing in the background; 2 GPUs on node ``n1``; alice has a token."""
    server = start(tmp_path, db_url)
    yield server
    stop(server)


def start(home: Path, db_url: str) -> Server:
    config = ServerConfig(node_name="n1", scheduler=SchedulerConfig.model_validate(FILE_SCHEDULER))
    server = build_server(home, config, db_url=db_url, emulate_gpus="2xH100-80GB")
    with server.ctx.db.write() as session:
        token_store.create_token(session, "alice", False, server.ctx.clock())
    return server


def stop(server: Server) -> None:
    server.ctx.shutdown()
    server.ctx.db.close()


def every_table(server: Server) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, as plain tuples in a stable order."""
    tables: dict[str, list[tuple[Any, ...]]] = {}
    with server.ctx.db.read() as session:
        for table in Base.metadata.sorted_tables:
            rows = session.execute(select(table)).all()
            tables[table.name] = sorted(tuple(map(repr, row)) for row in rows)
    return tables


def doc(**changes: Any) -> ClusterConfig:
    base: dict[str, Any] = {
        "priority_classes": [{"name": "urgent", "value": 100}],
        "queues": {"queues": [{"name": "vision", "guarantee": {"gpus": 1}}]},
        "nodes": {"n1": {"labels": {"zone": "a"}}},
    }
    return ClusterConfig.model_validate({**base, **changes})


def test_an_apply_takes_effect_persists_and_is_recorded(tmp_path: Path, db_url: str) -> None:
    server = start(tmp_path, db_url)
    admin = AdminService(server.ctx)
    new = doc(
        queues={"queues": [{"name": "vision", "guarantee": {"gpus": 2}, "members": ["alice"]}]}
    )
    version, changes = admin.apply(ADMIN, new)
    assert [c.path for c in changes] == [
        "nodes.n1",
        "queues.queues[vision].guarantee.gpus",
        "queues.queues[vision].members",
    ]
    assert server.ctx.config.scheduler.queues.queue("vision").members == ["alice"]
    with server.ctx.db.read() as session:
        (event,) = event_store.list_events(session, types=[event_store.EventType.CONFIG_APPLIED])
        hidden = event_store.list_events(session, visible_to="alice")
    assert event.payload["by"] == "admin" and event.payload["version"] == version
    assert event.payload["changes"][1] == {
        "path": "queues.queues[vision].guarantee.gpus",
        "before": 1.0,
        "after": 2.0,
    }
    assert not any(e.type == "config.applied" for e in hidden)  # admins only
    stop(server)

    again = start(tmp_path, db_url)  # the file still says 1 GPU; the stored apply wins
    current = AdminService(again.ctx).current(ADMIN)
    assert current.version == version and current.source == "api"
    assert current.config == new
    assert again.ctx.config.node.labels == {"zone": "a"}
    stop(again)


def test_a_refused_apply_names_every_error_and_leaves_every_table_as_it_was(
    server: Server,
) -> None:
    job = JobService(server.ctx).submit(
        JobSpec(image="img", queue="vision", priority_class="urgent"), ADMIN
    )
    before, config_before = every_table(server), server.ctx.config
    bad = doc(
        priority_classes=[],
        queues={
            "cohorts": ["research"],
            "groups": {"team": ["alice", "mallory"]},
            "queues": [
                {"name": "vision", "cohort": "research", "guarantee": {"gpus": 2}},
                {"name": "nlp", "cohort": "research", "guarantee": {"gpus": 1}, "members": ["eve"]},
            ],
        },
        nodes={"n1": {"taints": ["x:NoSchedule"]}, "ghost": {"labels": {"a": "b"}}},
    )
    with pytest.raises(ConfigRefused) as caught:
        AdminService(server.ctx).apply(ADMIN, bad)
    assert caught.value.errors == [
        ("queues.queues[1].members[0]", "unknown user 'eve'"),
        ("queues.groups.team[1]", "unknown user 'mallory'"),
        ("nodes.ghost", "unknown node 'ghost' (registered: n1)"),
        ("queues.cohorts[0]", "cohort 'research' guarantees 3 gpus in total but the cluster has 2"),
        (
            "priority_classes",
            f"priority class 'urgent' is removed but unfinished jobs use it: {job.id}",
        ),
    ]
    assert caught.value.status_code == 422
    assert every_table(server) == before
    assert server.ctx.config is config_before


def test_a_submit_checked_before_an_apply_that_removes_its_class_is_checked_again(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The apply lands between the submit's checks and its write: the submit is checked
    again against the new config, so no job is left naming a class that is gone."""
    real, calls = jobs_service.resolve_priority, []

    def checked_then_applied(*args: Any) -> Any:
        calls.append(args[0].priority_class)
        answer = real(*args)
        if len(calls) == 1:
            AdminService(server.ctx).apply(ADMIN, doc(priority_classes=[]))
        return answer

    monkeypatch.setattr(jobs_service, "resolve_priority", checked_then_applied)
    with pytest.raises(InvalidInput, match="priority_class 'urgent' is unknown"):
        JobService(server.ctx).submit(
            JobSpec(image="img", queue="vision", priority_class="urgent"), ADMIN
        )
    assert calls == ["urgent", "urgent"]
    assert JobService(server.ctx).query(ADMIN) == []
    assert server.ctx.config.scheduler.priority_classes == []


def test_a_diff_changes_nothing(server: Server) -> None:
    before = every_table(server)
    changes = AdminService(server.ctx).diff(ADMIN, doc(priority_classes=[]))
    assert [c.path for c in changes] == ["nodes.n1", "priority_classes[urgent]"]
    assert every_table(server) == before


def test_only_admins_may_read_or_change_the_config(server: Server) -> None:
    with pytest.raises(Forbidden):
        AdminService(server.ctx).current(ALICE)
    with pytest.raises(Forbidden):
        AdminService(server.ctx).apply(ALICE, doc())
