"""Two processes' contexts on one store (SQLite and PostgreSQL): what one commits, the
other's caches follow (``RuntimeContext.sync``, the cluster version).

Each ``RuntimeContext`` here stands for one process of a server (an API worker,
the controller): its own engine, config, token cache and node cache, one
database between them, exactly as ``gpudock server --api-workers N`` runs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.cluster_config import ClusterConfig
from gpudock.config import SchedulerConfig, ServerConfig
from gpudock.core.errors import Infeasible, InvalidInput, Unauthorized
from gpudock.core.inventory import NodeTraits
from gpudock.core.job import JobSpec, JobState
from gpudock.executors.base import Executor
from gpudock.gpus import emulated_inventory
from gpudock.runtime.context import RuntimeContext
from gpudock.server import Opened, open_cluster, runtime_context
from gpudock.services.admin import AdminService
from gpudock.services.auth import AuthService
from gpudock.services.jobs import JobService
from gpudock.store import inventory as inv_store
from gpudock.store import tokens as token_store
from gpudock.store.db import Database
from gpudock.store.tokens import CACHE_TTL, Principal

ADMIN = Principal(user="admin", is_admin=True)
CLASSES = {"priority_classes": [{"name": "urgent", "value": 100}]}


@pytest.fixture
def opened(tmp_path: Path, db_url: str) -> Iterator[Opened]:
    config = ServerConfig(node_name="n1", scheduler=SchedulerConfig.model_validate(CLASSES))
    opened = open_cluster(tmp_path, config, db_url=db_url, emulate_gpus="2xH100-80GB")
    yield opened
    opened.db.close()


@pytest.fixture
def worker(opened: Opened) -> Iterator[RuntimeContext]:
    """A second process on the same store: its own engine and caches."""
    db = Database.open(opened.db_url, migrate=False)
    other = Opened(**{**vars(opened), "db": db})
    ctx = runtime_context(other, process="api-2", executor=_no_engine())
    yield ctx
    ctx.shutdown()
    db.close()


@pytest.fixture
def first(opened: Opened) -> Iterator[RuntimeContext]:
    ctx = runtime_context(opened, process="api-1", executor=_no_engine())
    yield ctx
    ctx.shutdown()


def _no_engine() -> Executor:
    return None  # type: ignore[return-value]  # nothing here reaches the engine


def config(**changes: object) -> ClusterConfig:
    base: dict[str, object] = {**CLASSES, "nodes": {"n1": {"labels": {"zone": "a"}}}}
    return ClusterConfig.model_validate({**base, **changes})


def submit(ctx: RuntimeContext, **spec: object) -> JobState:
    return JobService(ctx).submit(JobSpec.model_validate({"image": "i", **spec}), ADMIN).state


def test_an_apply_in_one_process_is_in_force_in_another_at_its_next_request(
    first: RuntimeContext, worker: RuntimeContext
) -> None:
    """A class added elsewhere is accepted at once, though the worker's cached config
    (read before the apply) refuses it: a refusal is only final on the current config."""
    assert submit(worker, priority_class="urgent") == JobState.PENDING  # caches the config
    rush = {"priority_classes": [*CLASSES["priority_classes"], {"name": "rush", "value": 50}]}
    version, _ = AdminService(first).apply(ADMIN, config(**rush))

    assert AdminService(worker).current(ADMIN).version == version
    assert submit(worker, priority_class="rush") == JobState.PENDING


def test_a_submit_checked_against_a_stale_config_is_checked_again_under_the_lock(
    first: RuntimeContext, worker: RuntimeContext
) -> None:
    """The worker's cached config still has the class when it checks; the write lock's sync
    sees the newer version, and the check runs again: the job is refused, none is stored."""
    assert submit(worker, priority_class="urgent") == JobState.PENDING
    JobService(worker).cancel(1, ADMIN)  # no unfinished job names the class any more
    AdminService(first).apply(ADMIN, config(priority_classes=[]))
    stale = worker.config
    assert any(c.name == "urgent" for c in stale.scheduler.priority_classes)

    with pytest.raises(InvalidInput, match="priority_class 'urgent' is unknown"):
        submit(worker, priority_class="urgent")
    assert worker.config is not stale
    assert len(JobService(worker).query(ADMIN)) == 1


def test_the_nodes_a_submit_is_checked_against_follow_a_registration_elsewhere(
    first: RuntimeContext, worker: RuntimeContext
) -> None:
    """A job the node's old CPU count admits was accepted from the cache; once another
    process registers the node with fewer cores, the cache is read again: refused."""
    register(first, cpus=8)
    assert submit(worker, gpus=1, cpus=6) == JobState.PENDING
    register(first, cpus=4)

    with pytest.raises(Infeasible, match="CPU"):
        submit(worker, gpus=1, cpus=6)


def register(ctx: RuntimeContext, cpus: float) -> None:
    with ctx.db.write() as session:
        inv_store.register_node(
            session, emulated_inventory("n1", "2xH100-80GB"), ctx.clock(), NodeTraits(cpus=cpus)
        )


def test_a_token_revoked_in_one_process_stops_working_in_another_within_the_cache_ttl(
    first: RuntimeContext, worker: RuntimeContext
) -> None:
    with first.db.write() as session:
        info, secret = token_store.issue_token(session, "alice", True, first.clock())
    clock = [0.0]
    worker.tokens = token_store.TokenCache(monotonic=lambda: clock[0])
    assert AuthService(worker).authenticate_token(secret).user == "alice"  # cached now

    AuthService(first).revoke(ADMIN, info.id)
    with pytest.raises(Unauthorized, match="token revoked at"):
        AuthService(first).authenticate_token(secret)  # at once where it was revoked
    clock[0] = CACHE_TTL * 0.9
    assert AuthService(worker).authenticate_token(secret).user == "alice"  # its copy
    clock[0] = CACHE_TTL
    with pytest.raises(Unauthorized, match="token revoked at"):
        AuthService(worker).authenticate_token(secret)
