"""Job persistence: insert, read, and conditional state transitions.

Every state change goes through ``transition``, which checks the state
machine, guards the UPDATE on the expected current state (so two writers can
never both move a job), appends a ``job_events`` row and a ``job.state``
event (``store/events.py``), clears or replaces the job's reasons, and
releases the job's GPUs in the same transaction when it stops holding them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from pydantic import ValidationError
from sqlalchemy import (
    ColumnElement,
    Connection,
    Row,
    Text,
    and_,
    bindparam,
    cast,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from gpudock.core.arrays import ArrayTask
from gpudock.core.events import EventType
from gpudock.core.job import Job, JobPart, JobSpec, JobState, PendingReason, check_transition
from gpudock.scheduler.snapshot import JobRequest, Preemption, Resize
from gpudock.store import events as event_store
from gpudock.store.models import AllocationRow, GpuRow, JobEventRow, JobRow, MigDeviceRow

ACTIVE_STATES = (JobState.ALLOCATED, JobState.STARTING, JobState.RUNNING)
MAX_JOB_ID = 2**31 - 1  # jobs.id is a 32-bit INTEGER on PostgreSQL


def insert_job(
    session: Session,
    spec: JobSpec,
    user: str,
    now: float,
    can_preempt: bool = False,
    array: ArrayTask | None = None,
    cuda_require: str | None = None,
) -> Job:
    """Store a new PENDING job and return it (with its id).

    ``cuda_require``: its image's requirements (``ImageRequirements.text``), when known.

    ``spec.priority`` must already hold the priority class's value, if any;
    ``can_preempt`` comes from the class (jobs without a preempting one may not
    preempt; ``services.priority``). ``array`` makes it a task of a job array
    (an ``array_id`` of None: the first task, whose own id becomes the array's).
    """
    row = JobRow(
        user=user,
        name=spec.name,
        queue=spec.queue,
        priority=spec.priority,
        spec=spec.model_dump(mode="json"),
        gpus=spec.gpus,
        gpu_memory=spec.gpu_memory,
        gpu_model=spec.gpu_model,
        nodes=spec.nodes,
        cpus=spec.cpus,
        max_runtime=spec.max_runtime,
        min_runtime=spec.min_runtime,
        restart_cost=spec.restart_cost,
        checkpoint_interval=spec.checkpoint_interval,
        preemptible=spec.preemptible,
        can_preempt=can_preempt,
        node_selector=dict(spec.node_selector),
        tolerations=list(spec.tolerations),
        topology=spec.topology,
        failures=0,
        state=JobState.PENDING.value,
        attempt=0,
        version=0,
        submitted_at=now,
        pending_reasons=[],
        after=list(spec.after) or None,
        after_ok=list(spec.after_ok) or None,
        cuda_require=cuda_require,
    )
    session.add(row)
    session.flush()
    if array is not None:
        row.array_id = array.array_id if array.array_id is not None else row.id
        row.array_index, row.array_limit = array.index, array.limit
    session.add(
        JobEventRow(
            job_id=row.id, at=now, attempt=0, from_state="", to_state="PENDING", reason="submitted"
        )
    )
    event_store.append(
        session,
        EventType.JOB_STATE,
        now,
        {"from": None, "to": "PENDING", "reason": "submitted", "attempt": 0},
        job_id=row.id,
        user=user,
        queue=spec.queue,
    )
    return to_job(row, ())


def get_job(session: Session, job_id: int) -> Job | None:
    """The job, or None; also None for an id no row can have (never a database error)."""
    if not 0 < job_id <= MAX_JOB_ID:
        return None
    row = session.get(JobRow, job_id)
    if row is None:
        return None
    return to_job(row, _allocations(session, [job_id]).get(job_id, ()))


def get_jobs(session: Session, job_ids: Iterable[int]) -> list[Job]:
    """The jobs with these ids that exist, in id order."""
    ids = sorted(set(job_ids))
    if not ids:
        return []
    rows = list(session.scalars(select(JobRow).where(JobRow.id.in_(ids)).order_by(JobRow.id)))
    allocs = _allocations(session, [r.id for r in rows])
    return [to_job(r, allocs.get(r.id, ())) for r in rows]


def list_jobs(
    session: Session | Connection,
    states: Sequence[JobState] | None = None,
    queue: str | None = None,
    user: str | None = None,
    limit: int | None = None,
    newest_first: bool = True,
    before: int | None = None,
) -> list[Job]:
    """Jobs matching every given filter, with their allocations.

    Read as plain rows (no ORM objects), so a ``Connection`` serves as well as a
    ``Session``: the API's listing reads on one (``Database.rows``).
    ``before`` keeps only jobs with a smaller id (the cursor of a newest-first page).

    A ``queue`` or ``user`` holding a NUL character matches nothing (PostgreSQL
    text cannot hold one, so it is never sent there).
    """
    if any("\x00" in text for text in (queue, user) if text is not None):
        return []
    given: dict[str, object] = {"states": [s.value for s in states or ()] or None}
    given |= {"queue": queue, "user": user, "before": before, "limit": limit}
    params = {k: v for k, v in given.items() if v is not None}
    stmt = _list_statement(frozenset(params), newest_first)
    rows = list(session.execute(stmt, params))
    allocs = _allocations(session, [r.id for r in rows if r.state in ACTIVE_STATES])
    return [to_job(r, allocs.get(r.id, ())) for r in rows]


@lru_cache(maxsize=64)
def _list_statement(filters: frozenset[str], newest_first: bool) -> Any:
    """``list_jobs``' statement for one set of filters, built once: its values are bound
    parameters, so each call skips building and keying the statement."""
    stmt = select(JobRow.__table__)
    if "states" in filters:
        stmt = stmt.where(JobRow.state.in_(bindparam("states", expanding=True)))
    if "queue" in filters:
        stmt = stmt.where(JobRow.queue == bindparam("queue"))
    if "user" in filters:
        stmt = stmt.where(JobRow.user == bindparam("user"))
    if "before" in filters:
        stmt = stmt.where(JobRow.id < bindparam("before"))
    stmt = stmt.order_by(JobRow.id.desc() if newest_first else JobRow.id.asc())
    if "limit" in filters:
        stmt = stmt.limit(bindparam("limit"))
    return stmt


def count_by_state(session: Session) -> dict[str, int]:
    rows = session.execute(select(JobRow.state, func.count()).group_by(JobRow.state))
    return {state: count for state, count in rows.tuples()}


def job_events(session: Session, job_id: int) -> list[dict[str, Any]]:
    stmt = select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id)
    return [
        {
            "at": e.at,
            "attempt": e.attempt,
            "from": e.from_state or None,
            "to": e.to_state,
            "reason": e.reason,
        }
        for e in session.scalars(stmt)
    ]


def transition(
    session: Session,
    job_id: int,
    expected: JobState,
    target: JobState,
    now: float,
    reason: str | None = None,
    **fields: Any,
) -> bool:
    """Move a job from ``expected`` to ``target`` if it is still in ``expected``.

    Returns False (and changes nothing) when another writer moved it first,
    or when a held job (``held_by``) would be ALLOCATED.
    Raises ``IllegalTransition`` for moves the state machine forbids. When the
    job leaves the resource-holding states its GPUs are released; when it is
    requeued to PENDING its attempt counter grows.

    Reasons are cleared or replaced on every state change: the job's
    ``reason`` becomes ``reason`` (None clears it) and its scheduler pending
    reasons are emptied (the next cycle explains a PENDING job afresh). The
    old ones stay in its history (``job_events`` and the event log).
    """
    check_transition(expected, target, reason)
    values: dict[str, Any] = {
        "state": target.value,
        "version": JobRow.version + 1,
        **fields,
        "reason": reason,
        "pending_reasons": [],
    }
    if target.terminal:
        values.setdefault("finished_at", now)
    if target is JobState.PENDING:
        values["attempt"] = JobRow.attempt + 1
        values.update(
            node=None,
            container_id=None,
            container_name=None,
            allocated_at=None,
            started_at=None,
            gpu_uuids=None,
            gang=None,
            exit_code=None,
            stop_requested=None,
            stop_requested_by=None,
            preempted_for=None,
            gpu_layers=None,
        )
    guard = [JobRow.id == job_id, JobRow.state == expected.value]
    if target is JobState.ALLOCATED:
        guard.append(JobRow.held_by.is_(None))  # a held job is never placed
    result = session.execute(
        update(JobRow).where(*guard).values(**values).execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    attempt = session.scalar(select(JobRow.attempt).where(JobRow.id == job_id)) or 0
    session.add(
        JobEventRow(
            job_id=job_id,
            at=now,
            attempt=attempt,
            from_state=expected.value,
            to_state=target.value,
            reason=reason,
        )
    )
    payload = {"from": expected.value, "to": target.value, "reason": reason, "attempt": attempt}
    node = fields.get("node") if target is not JobState.PENDING else None
    event_store.append_for_job(session, EventType.JOB_STATE, job_id, now, payload, node=node)
    if expected.holds_resources and not target.holds_resources:
        release_allocation(session, job_id)
    return True


def release_allocation(session: Session, job_id: int) -> None:
    """Give back every GPU (or GPU memory share) and MIG device the job holds. Idempotent."""
    rows = list(session.scalars(select(AllocationRow).where(AllocationRow.job_id == job_id)))
    for alloc in rows:
        if alloc.memory is None:
            session.execute(
                update(GpuRow)
                .where(GpuRow.uuid == alloc.gpu_uuid, GpuRow.exclusive_job == job_id)
                .values(exclusive_job=None, used_memory=0, version=GpuRow.version + 1)
                .execution_options(synchronize_session=False)
            )
        else:
            session.execute(
                update(GpuRow)
                .where(GpuRow.uuid == alloc.gpu_uuid)
                .values(
                    used_memory=GpuRow.used_memory - alloc.memory,
                    shared_jobs=GpuRow.shared_jobs - 1,
                    version=GpuRow.version + 1,
                )
                .execution_options(synchronize_session=False)
            )
        session.delete(alloc)
    session.execute(
        update(MigDeviceRow)
        .where(MigDeviceRow.job_id == job_id)
        .values(job_id=None, version=MigDeviceRow.version + 1)
        .execution_options(synchronize_session=False)
    )
    session.flush()


def set_pending_reasons(session: Session, reasons: dict[int, list[PendingReason]]) -> None:
    """Record why each still-PENDING job waits; jobs that moved on are skipped.

    A cycle gives every pending job its reasons, and most are the ones it
    already has: those rows are read (as stored JSON text) and left
    unwritten, and the rest are written in one ``executemany``. So a cycle
    over thousands of waiting jobs holds the write lock for the few that
    changed. Skipping is only an optimisation: a row whose text differs in
    any way is written. Many jobs wait for the same reasons, so each distinct
    list is serialised once (``_reasons_text``).
    """
    wanted = {job_id: _reasons_text(tuple(items)) for job_id, items in reasons.items()}
    changed: list[dict[str, Any]] = []
    ids = list(wanted)
    for start in range(0, len(ids), _ID_CHUNK):
        chunk = ids[start : start + _ID_CHUNK]
        stored = session.execute(
            select(JobRow.id, cast(JobRow.pending_reasons, Text)).where(
                JobRow.id.in_(chunk), JobRow.state == JobState.PENDING.value
            )
        )
        changed += [
            {"job_id": job_id, "reasons": [r.to_dict() for r in reasons[job_id]]}
            for job_id, text in stored
            if text != wanted[job_id]
        ]
    if changed:
        session.connection().execute(_SET_REASONS, changed)


@lru_cache(maxsize=1024)
def _reasons_text(reasons: tuple[PendingReason, ...]) -> str:
    """The JSON text a list of reasons is stored as (the JSON column's ``json.dumps``)."""
    return json.dumps([r.to_dict() for r in reasons])


def after_in_order(last: JobRequest) -> ColumnElement[bool]:
    """The condition "after ``last`` in the scheduler's order" (priority, higher
    first; then submit time; then id) on ``jobs``."""
    return or_(
        JobRow.priority < last.priority,
        and_(
            JobRow.priority == last.priority,
            or_(
                JobRow.submitted_at > last.submitted_at,
                and_(JobRow.submitted_at == last.submitted_at, JobRow.id > last.id),
            ),
        ),
    )


def set_backlog_reason(session: Session, last: JobRequest, reason: PendingReason) -> int:
    """Give ``reason`` to the PENDING jobs after ``last`` in the scheduler's order
    (priority, then submit time, then id) that have no reason yet; return how many.

    For the jobs beyond a cycle's window: a job that was never considered
    says why, and one that was keeps its last, more specific reason. Held
    jobs are left alone (``gpudock hold`` says why they wait).
    """
    result = session.execute(
        update(JobRow)
        .where(
            JobRow.state == JobState.PENDING.value,
            or_(JobRow.pending_reasons.is_(None), cast(JobRow.pending_reasons, Text) == "[]"),
            JobRow.held_by.is_(None),
            after_in_order(last),
        )
        .values(pending_reasons=[reason.to_dict()])
        .execution_options(synchronize_session=False)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def set_active_reason(
    session: Session, job_id: int, attempt: int, reason: PendingReason | None
) -> bool:
    """Give an active job (ALLOCATED, STARTING or RUNNING, still on ``attempt``) the one
    reason it does not progress (None clears it); False when it is no longer such.

    Only the runtime's engine holds use it (``runtime/undescribed.py``): the job
    keeps its state and GPUs; any state change clears the reason (``transition``).
    """
    result = session.execute(
        update(JobRow)
        .where(
            JobRow.id == job_id,
            JobRow.attempt == attempt,
            JobRow.state.in_([s.value for s in ACTIVE_STATES]),
        )
        .values(pending_reasons=[] if reason is None else [reason.to_dict()])
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


_ID_CHUNK = 1000  # ids per IN (...) list, far below every backend's bound-parameter limit
_SET_REASONS = (  # run on the connection: one executemany, compiled once
    update(JobRow)
    .where(JobRow.id == bindparam("job_id"), JobRow.state == JobState.PENDING.value)
    .values(pending_reasons=bindparam("reasons"))
)


def note(session: Session, job_id: int, reason: str) -> bool:
    """Set an active job's ``reason`` without a state change (e.g. its node is lost and
    it waits for the operator); True if it changed. The next transition replaces it."""
    result = session.execute(
        update(JobRow)
        .where(
            JobRow.id == job_id,
            JobRow.state.in_([s.value for s in ACTIVE_STATES]),
            or_(JobRow.reason.is_(None), JobRow.reason != reason),
        )
        .values(reason=reason)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def request_stop(
    session: Session, job_id: int, kind: str, by: str, now: float | None = None
) -> bool:
    """Flag an active job to be stopped (``cancel``, ``max_runtime``, ``requeue`` or
    ``resize``).
    First flag wins.

    A ``max_runtime`` stop given ``now`` records a ``job.watchdog_kill`` event.
    """
    result = session.execute(
        update(JobRow)
        .where(
            JobRow.id == job_id,
            JobRow.state.in_([s.value for s in ACTIVE_STATES]),
            JobRow.stop_requested.is_(None),
        )
        .values(stop_requested=kind, stop_requested_by=by, version=JobRow.version + 1)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    if kind == "max_runtime" and now is not None:
        row = session.execute(
            select(JobRow.node, JobRow.max_runtime).where(JobRow.id == job_id)
        ).one()
        node, payload = row[0], {"by": by, "max_runtime": row[1]}
        event_store.append_for_job(
            session, EventType.JOB_WATCHDOG_KILL, job_id, now, payload, node=node
        )
    return True


def request_preemption(session: Session, preemption: Preemption, now: float | None = None) -> bool:
    """Ask a preemptible, active victim to stop for ``preemption.preemptor_id``.

    Given ``now``, a successful request records a ``job.preempted`` event.

    Conditional like every write here: a victim that already ended, is already
    stopping, or is not preemptible is left alone (returns False).
    """
    result = session.execute(
        update(JobRow)
        .where(
            JobRow.id == preemption.victim_id,
            JobRow.state.in_([s.value for s in ACTIVE_STATES]),
            JobRow.stop_requested.is_(None),
            JobRow.preemptible.is_(True),
        )
        .values(
            stop_requested="preempt",
            stop_requested_by=preemption.reason[:128],
            preempted_for=preemption.preemptor_id,
            version=JobRow.version + 1,
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    if now is not None:
        _preemption_event(session, preemption, now)
    return True


def request_resize(session: Session, resize: Resize, now: float) -> bool:
    """Ask a running elastic job to stop so that it restarts on more GPUs (``Resize``).

    Conditional: a job that ended, is already stopping or is not active is
    left alone (returns False). Records a ``job.resized`` event (from, to);
    the finisher requeues it without using a retry.
    """
    why = f"the scheduler, to grow from {resize.from_gpus} to {resize.to_gpus} GPUs"
    if not request_stop(session, resize.job_id, "resize", why):
        return False
    payload = {"from": resize.from_gpus, "to": resize.to_gpus}
    event_store.append_for_job(
        session, EventType.JOB_RESIZED, resize.job_id, now, payload, node=resize.node
    )
    return True


def _preemption_event(session: Session, preemption: Preemption, now: float) -> None:
    """Record who preempted the victim (the preemptor's id, user, queue and class), the
    cost charged to the victim and the gain the scheduler expected."""
    victim_node = session.scalar(select(JobRow.node).where(JobRow.id == preemption.victim_id))
    preemptor = session.get(JobRow, preemption.preemptor_id)
    payload: dict[str, Any] = {
        "preemptor": preemption.preemptor_id,
        "reason": preemption.reason,
        "cost_s": preemption.cost,  # charged to the victim: its restart and lost work
        "gain_s": preemption.gain,  # expected; null: unbounded (the victims' ends unknown)
    }
    if preemptor is not None:
        payload.update(
            preemptor_user=preemptor.user,
            preemptor_queue=preemptor.queue,
            preemptor_class=(preemptor.spec or {}).get("priority_class"),
            preemptor_priority=preemptor.priority,
        )
    event_store.append_for_job(
        session, EventType.JOB_PREEMPTED, preemption.victim_id, now, payload, node=victim_node
    )


def _allocations(
    session: Session | Connection, job_ids: Iterable[int]
) -> dict[int, tuple[Row[Any], ...]]:
    """The allocation rows of ``job_ids``, by job, in id order (plain rows)."""
    ids = list(job_ids)
    if not ids:
        return {}
    out: dict[int, list[Row[Any]]] = {}
    table = AllocationRow.__table__
    stmt = select(table).where(table.c.job_id.in_(ids)).order_by(table.c.id)
    for alloc in session.execute(stmt):
        out.setdefault(alloc.job_id, []).append(alloc)
    return {k: tuple(v) for k, v in out.items()}


def to_job(row: JobRow | Row[Any], allocs: Sequence[AllocationRow | Row[Any]]) -> Job:
    """The domain ``Job`` of a stored row: an ORM ``JobRow`` or a plain row of the table
    (the same names), with its allocation rows."""
    return Job(
        id=row.id,
        spec=stored_spec(row.spec),
        user=row.user,
        state=JobState(row.state),
        submitted_at=row.submitted_at,
        attempt=row.attempt,
        failures=row.failures,
        version=row.version,
        reason=row.reason,
        pending_reasons=[PendingReason(**r) for r in (row.pending_reasons or [])],
        allocated_at=row.allocated_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        exit_code=row.exit_code,
        node=row.node,
        container_id=row.container_id,
        container_name=row.container_name,
        cancel_requested=row.stop_requested == "cancel",
        stop_requested=row.stop_requested,
        stop_requested_by=row.stop_requested_by,
        log_path=row.log_path,
        gpu_uuids=tuple(row.gpu_uuids or ()),
        gpu_memory_per_gpu=allocs[0].memory if allocs else None,
        array_id=row.array_id,
        array_index=row.array_index,
        held_by=row.held_by,
        held_at=row.held_at,
        gpu_layers=tuple(row.gpu_layers or ()),
        gang=gang_parts(row.gang),
    )


def gang_parts(stored: list[list[object]] | None) -> tuple[JobPart, ...]:
    """A stored ``jobs.gang`` (``[[node, [uuid, ...]], ...]``) as ``JobPart``s, rank order."""
    parts = []
    for node, uuids in stored or ():
        assert isinstance(uuids, list)
        parts.append(JobPart(str(node), tuple(str(u) for u in uuids)))
    return tuple(parts)


def stored_spec(data: dict[str, Any]) -> JobSpec:
    """The spec as it was stored. It was validated when submitted; one that today's
    stricter rules refuse (NaN runtimes, say) is kept as it is, never an error: a
    stored job must stay readable, or listing jobs and reconciling would fail."""
    try:
        return JobSpec.model_validate(data)
    except ValidationError:
        return JobSpec.model_construct(**data)
