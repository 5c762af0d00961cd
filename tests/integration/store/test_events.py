"""The durable event log on real SQLite and PostgreSQL: events are written in the
transaction of the change they record, paged by cursor, filtered, and pruned."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpudock.core.events import EventsConfig, EventType
from gpudock.core.inventory import GpuHealth, GpuInfo, NodeInventory, NodeStatus
from gpudock.core.job import JobSpec, JobState, PendingReason
from gpudock.runtime.event_pruner import EventPruner
from gpudock.scheduler.snapshot import Placement, Plan, Preemption
from gpudock.store import events as event_store
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.applier import apply_plan
from gpudock.store.db import Database
from gpudock.store.events import Event

GIB = 1024**3


def node(name: str = "n0", unhealthy: tuple[int, ...] = ()) -> NodeInventory:
    gpus = tuple(
        GpuInfo(
            index=i, uuid=f"GPU-{name}-{i}", name="NVIDIA H100", memory_total=80 * GIB,
            health=GpuHealth.UNHEALTHY if i in unhealthy else GpuHealth.OK,
        )
        for i in range(2)
    )  # fmt: skip
    return NodeInventory(name=name, gpus=gpus, source="emulated")


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    database = Database.open(db_url)
    with database.write() as s:
        inv_store.register_node(s, node(), now=0.0)
    yield database
    database.close()


def submit(db: Database, user: str = "al", queue: str = "default", **spec: Any) -> int:
    with db.write() as s:
        job = JobSpec.model_validate({"image": "img", "gpus": 1, "queue": queue, **spec})
        return job_store.insert_job(s, job, user, 1.0).id


def events(db: Database, **filters: Any) -> list[Event]:
    with db.read() as s:
        return event_store.list_events(s, **{"limit": 1000, **filters})


def kinds(items: list[Event]) -> list[tuple[str, Any]]:
    return [(e.type, e.payload.get("to")) for e in items]


def place(db: Database, job_id: int, gpu: int, now: float) -> None:
    result = apply_plan(db, Plan(placements=[Placement(job_id, "n0", (f"GPU-n0-{gpu}",))]), now)
    assert [p.job_id for p in result.committed] == [job_id]


def run(db: Database, job_id: int, now: float) -> None:
    with db.write() as s:
        assert job_store.transition(s, job_id, JobState.ALLOCATED, JobState.STARTING, now)
        assert job_store.transition(s, job_id, JobState.STARTING, JobState.RUNNING, now)


def test_a_state_change_and_its_event_commit_or_roll_back_together(db: Database) -> None:
    job = submit(db, user="bo", queue="vision")
    with pytest.raises(RuntimeError), db.write() as s:
        assert job_store.transition(s, job, JobState.PENDING, JobState.CANCELLED, 2.0, "by bo")
        raise RuntimeError("the transaction fails after the transition")
    assert kinds(events(db, job_id=job)) == [("job.state", "PENDING")]

    with db.write() as s:
        assert job_store.transition(s, job, JobState.PENDING, JobState.CANCELLED, 3.0, "by bo")
    submitted, cancelled = events(db, job_id=job)
    assert (cancelled.type, cancelled.at, cancelled.user, cancelled.queue) == (
        "job.state",
        3.0,
        "bo",
        "vision",
    )
    assert cancelled.payload == {
        "from": "PENDING",
        "to": "CANCELLED",
        "reason": "by bo",
        "attempt": 0,
    }
    assert submitted.id < cancelled.id


def test_placement_and_preemption_name_the_node_gpus_and_preemptor(db: Database) -> None:
    victim = submit(db, user="al", queue="default")
    preemptor = submit(db, user="bo", queue="vision", priority_class="urgent")
    place(db, victim, 0, now=2.0)
    run(db, victim, now=3.0)
    plan = Plan(preemptions=[Preemption(victim, preemptor, f"preempted by job {preemptor}")])
    assert apply_plan(db, plan, 4.0).preempted == [victim]

    log = events(db, job_id=victim)
    assert [e.type for e in log] == [
        "job.state", "job.placed", "job.state", "job.state", "job.state", "job.preempted",
    ]  # fmt: skip
    placed, allocated = log[1], log[2]
    assert (placed.node, placed.payload) == ("n0", {"gpus": ["GPU-n0-0"], "memory_per_gpu": None})
    assert (allocated.payload["to"], allocated.node) == ("ALLOCATED", "n0")
    preempted = log[-1]
    assert (preempted.user, preempted.node, preempted.at) == ("al", "n0", 4.0)
    assert preempted.payload["preemptor"] == preemptor
    assert preempted.payload["preemptor_user"] == "bo"
    assert preempted.payload["preemptor_queue"] == "vision"
    assert preempted.payload["preemptor_class"] == "urgent"


def test_a_rejected_placement_leaves_no_event(db: Database) -> None:
    first, second = submit(db), submit(db)
    place(db, first, 0, now=2.0)
    plan = Plan(placements=[Placement(second, "n0", ("GPU-n0-0",))])  # GPU 0 is taken
    assert apply_plan(db, plan, 3.0).rejected
    assert kinds(events(db, job_id=second)) == [("job.state", "PENDING")]


def test_reasons_are_cleared_on_every_state_change_and_kept_in_the_history(
    db: Database,
) -> None:
    job = submit(db)
    place(db, job, 0, now=2.0)
    run(db, job, now=3.0)
    with db.write() as s:
        assert job_store.transition(
            s, job, JobState.RUNNING, JobState.PENDING, 4.0, "preempted by job 9"
        )
        job_store.set_pending_reasons(s, {job: [PendingReason("devices", "no idle GPU")]})
    with db.read() as s:
        waiting = job_store.get_job(s, job)
    assert waiting is not None and waiting.reason == "preempted by job 9"
    assert [r.message for r in waiting.pending_reasons] == ["no idle GPU"]

    place(db, job, 1, now=5.0)
    for state in ("ALLOCATED", "RUNNING"):
        with db.read() as s:
            now_job = job_store.get_job(s, job)
        assert now_job is not None and now_job.state.value == state
        assert (now_job.reason, now_job.pending_reasons) == (None, [])
        if state == "ALLOCATED":
            run(db, job, now=6.0)
    reasons = [e.payload["reason"] for e in events(db, job_id=job, types=[EventType.JOB_STATE])]
    assert "preempted by job 9" in reasons


def test_cursor_pages_cover_every_event_once_in_id_order(db: Database) -> None:
    jobs = [submit(db, user=u) for u in ("al", "bo", "al", "cy", "al")]
    for job in jobs:
        with db.write() as s:
            job_store.transition(s, job, JobState.PENDING, JobState.CANCELLED, 2.0, "stop")
    everything = events(db)
    seen: list[int] = []
    cursor = 0
    while True:
        with db.read() as s:
            page = event_store.list_events(s, since=cursor, limit=3)
        if not page:
            break
        seen += [e.id for e in page]
        cursor = page[-1].id
    assert seen == [e.id for e in everything] == sorted(seen) and len(seen) == 10


def test_filters_by_job_type_and_visibility(db: Database) -> None:
    mine, theirs = submit(db, user="al"), submit(db, user="bo")
    place(db, mine, 0, now=2.0)
    with db.write() as s:
        inv_store.set_node_status(s, "n0", NodeStatus.UNAVAILABLE, "Docker down", 3.0)
    assert {e.job_id for e in events(db, job_id=theirs)} == {theirs}
    assert [e.type for e in events(db, types=[EventType.JOB_PLACED])] == ["job.placed"]
    visible = events(db, visible_to="al")
    assert {e.job_id for e in visible} == {mine, None}
    assert [e.type for e in visible if e.job_id is None] == ["node.health"]
    assert {e.job_id for e in events(db)} == {mine, theirs, None}


def test_node_and_gpu_health_changes_are_recorded_once(db: Database) -> None:
    with db.write() as s:
        inv_store.set_node_status(s, "n0", NodeStatus.UNAVAILABLE, "Docker down", 2.0)
        inv_store.set_node_status(s, "n0", NodeStatus.UNAVAILABLE, "Docker down", 2.5)
        inv_store.set_node_status(s, "n0", NodeStatus.AVAILABLE, None, 3.0)
        inv_store.register_node(s, node(unhealthy=(1,)), now=4.0)
        inv_store.register_node(s, node(unhealthy=(1,)), now=5.0)
    health = events(db, types=[EventType.NODE_HEALTH, EventType.GPU_HEALTH])
    assert [(e.type, e.node, e.payload.get("to")) for e in health] == [
        ("node.health", "n0", "unavailable"),
        ("node.health", "n0", "available"),
        ("gpu.health", "n0", "unhealthy"),
    ]
    assert health[0].payload["reason"] == "Docker down"
    assert health[2].payload == {
        "uuid": "GPU-n0-1",
        "index": 1,
        "from": "ok",
        "to": "unhealthy",
        "reason": "NVML queries of it failed at discovery",
    }


def test_a_watchdog_stop_is_recorded_with_its_limit(db: Database) -> None:
    job = submit(db, max_runtime=60)
    place(db, job, 0, now=2.0)
    run(db, job, now=3.0)
    with db.write() as s:
        assert job_store.request_stop(s, job, "max_runtime", "gpudock", 70.0)
        assert not job_store.request_stop(s, job, "max_runtime", "gpudock", 71.0)  # first wins
    (kill,) = events(db, types=[EventType.JOB_WATCHDOG_KILL])
    assert (kill.job_id, kill.at, kill.node, kill.payload) == (
        job,
        70.0,
        "n0",
        {"by": "gpudock", "max_runtime": 60.0},
    )


def _event_at(db: Database, at: float) -> None:
    with db.write() as s:
        event_store.append(s, EventType.NODE_HEALTH, at, {"to": "available"}, node="n0")


def test_pruning_by_age_and_count_on_an_injected_clock(db: Database) -> None:
    day = 86400.0
    for at in (0.0, 1 * day, 2 * day, 40 * day, 41 * day):
        _event_at(db, at)
    pruner = EventPruner()
    config = EventsConfig.model_validate({"max_age": "30d", "prune_interval": "1h"})
    assert pruner.tick(db, config, now=42 * day) == 3  # older than 30 days
    assert [e.at for e in events(db)] == [40 * day, 41 * day]
    _event_at(db, 42 * day)
    assert pruner.tick(db, config, now=42 * day + 60) == 0  # within prune_interval: no run
    by_count = EventsConfig.model_validate({"max_age": None, "max_count": 1})
    assert pruner.tick(db, by_count, now=43 * day) == 2
    (newest,) = events(db)
    assert newest.at == 42 * day


def test_pruning_everything_old_keeps_ids_growing(db: Database) -> None:
    _event_at(db, 0.0)
    last = events(db)[-1].id
    with db.write() as s:
        assert event_store.prune(s, now=1e9, max_age=1.0, max_count=None) >= 1
    _event_at(db, 1e9)
    assert events(db)[-1].id > last


def test_the_default_keeps_thirty_days() -> None:
    config = EventsConfig()
    assert (config.max_age, config.max_count) == (30 * 86400.0, None)
