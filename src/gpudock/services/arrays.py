"""Submit of a job array: one stored job (task) per index, in one transaction.

``plan_array`` checks the range against the server's ``api.max_array_size``
before anything is stored (``InvalidInput``, 422); ``insert_tasks`` stores
the tasks in index order, the first task's id being the array's id. A spec
without ``array`` is one ordinary job.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from gpudock.core.arrays import ArrayRange, ArrayTask, parse_array
from gpudock.core.errors import InvalidInput
from gpudock.core.job import Job, JobSpec
from gpudock.store import jobs as job_store


def plan_array(spec: JobSpec, max_size: int) -> ArrayRange | None:
    """The spec's array, or None; ``InvalidInput`` when it has over ``max_size`` tasks."""
    if spec.array is None:
        return None
    try:
        array = parse_array(spec.array)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="array") from None
    if array.size > max_size:
        raise InvalidInput(
            f"array {spec.array!r} has {array.size} tasks; this server allows at most "
            f"{max_size} (api.max_array_size)",
            field="array",
        )
    return array


def insert_tasks(
    session: Session,
    spec: JobSpec,
    user: str,
    now: float,
    can_preempt: bool,
    array: ArrayRange | None,
    cuda_require: str | None = None,
) -> Job:
    """Store the job, or every task of ``array``; return the (first) job. ``cuda_require``:
    its image's requirements, when known (``job_store.insert_job``)."""
    if array is None:
        return job_store.insert_job(
            session, spec, user, now, can_preempt=can_preempt, cuda_require=cuda_require
        )
    first: Job | None = None
    for index in array.indices():
        task = ArrayTask(first.id if first else None, index, array.limit)
        job = job_store.insert_job(
            session, spec, user, now, can_preempt=can_preempt, array=task, cuda_require=cuda_require
        )
        first = first or job
    assert first is not None
    return first
