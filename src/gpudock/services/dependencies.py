"""Submit-time checks of a job's dependencies (``after``, ``after_ok``).

A dependency must name a job that exists and that the submitter may see
(their own; an admin's, any): else ``NotFound``, the same answer as for a
job that does not exist, so ids of other users' jobs are not revealed. A
new job can only name jobs that exist before it, and stored dependencies
never change, so a cycle cannot form: naming the job's own (future) id is
refused as a job that does not exist. The waiting itself is the gates'
(``queue/gates.py``).
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.core.errors import NotFound
from gpudock.core.job import JobSpec
from gpudock.store.models import JobRow
from gpudock.store.tokens import Principal


def check_dependencies(session: Session, spec: JobSpec, principal: Principal) -> None:
    """Raise ``NotFound`` naming the first dependency that is missing or not visible."""
    wanted = list(dict.fromkeys([*spec.after, *spec.after_ok]))
    if not wanted:
        return
    rows = session.execute(select(JobRow.id, JobRow.user).where(JobRow.id.in_(wanted)))
    owners: dict[int, str] = {job_id: user for job_id, user in rows}
    for job_id in wanted:
        owner = owners.get(job_id)
        if owner is None or not (principal.is_admin or owner == principal.user):
            raise NotFound(f"dependency job {job_id} not found")
