"""``max_pending_per_user`` on the real store (SQLite and PostgreSQL): the count and the
insert share one write transaction, so concurrent submits never exceed the limit."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpudock.config import SchedulerConfig, ServerConfig
from gpudock.core.errors import Forbidden, TooManyRequests
from gpudock.core.job import JobSpec, JobState
from gpudock.server import Server, build_server
from gpudock.services.jobs import JobService
from gpudock.store import jobs as job_store
from gpudock.store.tokens import Principal

ALICE = Principal(user="alice", is_admin=False)
BOB = Principal(user="bob", is_admin=False)
ADMIN = Principal(user="admin", is_admin=True)
QUEUES = {
    "groups": {"vision": ["alice", "bob"]},
    "queues": [
        {"name": "vision", "members": ["group:vision"], "max_pending_per_user": 3},
        {"name": "open"},
    ],
}


@pytest.fixture
def server(tmp_path: Path, db_url: str) -> Iterator[Server]:
    """In-process, nothing in the background: submitted jobs stay PENDING."""
    config = ServerConfig(scheduler=SchedulerConfig.model_validate({"queues": QUEUES}))
    server = build_server(tmp_path, config, db_url=db_url, emulate_gpus="1xH100-80GB")
    yield server
    server.ctx.shutdown()
    server.ctx.db.close()


def submit(server: Server, principal: Principal, queue: str = "vision") -> int:
    return JobService(server.ctx).submit(JobSpec(image="img", queue=queue), principal).id


def pending(server: Server, user: str, queue: str = "vision") -> int:
    with server.ctx.db.read() as session:
        jobs = job_store.list_jobs(session, states=[JobState.PENDING], queue=queue, user=user)
    return len(jobs)


def test_the_submit_over_the_limit_gets_429_naming_it(server: Server) -> None:
    for _ in range(3):
        submit(server, ALICE)
    with pytest.raises(TooManyRequests) as caught:
        submit(server, ALICE)
    assert caught.value.status_code == 429
    assert caught.value.message == (
        "queue 'vision' allows 3 pending jobs per user (max_pending_per_user) and user "
        "'alice' has 3; wait until some start, or cancel one"
    )
    submit(server, BOB)  # per user: bob has his own three
    submit(server, ALICE, queue="open")  # and per queue
    first = JobService(server.ctx).query(ALICE, queue="vision")[-1]
    JobService(server.ctx).cancel(first.id, ALICE)
    submit(server, ALICE)  # a cancelled job no longer counts
    assert pending(server, "alice") == 3


def test_concurrent_submits_never_exceed_the_limit(server: Server) -> None:
    outcomes: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def one() -> None:
        start.wait()
        try:
            submit(server, ALICE)
            result = "ok"
        except TooManyRequests:
            result = "429"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(outcomes) == ["429"] * 5 + ["ok"] * 3
    assert pending(server, "alice") == 3


def test_membership_is_checked_before_anything_is_stored(server: Server) -> None:
    carol = Principal(user="carol", is_admin=False)
    with pytest.raises(Forbidden, match="user 'carol' is not a member of queue 'vision'"):
        submit(server, carol)
    assert pending(server, "carol") == 0
    submit(server, carol, queue="open")
    submit(server, ADMIN)  # admins submit anywhere
    assert (pending(server, "carol", "open"), pending(server, "admin")) == (1, 1)


def test_an_array_counts_each_task_against_the_limit_and_is_stored_whole_or_not_at_all(
    server: Server,
) -> None:
    submit(server, ALICE)
    service = JobService(server.ctx)
    with pytest.raises(TooManyRequests, match=r"has 1 \(this array adds 3\)"):
        service.submit(JobSpec(image="img", queue="vision", array="0-2"), ALICE)
    assert pending(server, "alice") == 1
    service.submit(JobSpec(image="img", queue="vision", array="0-1"), ALICE)
    assert pending(server, "alice") == 3
