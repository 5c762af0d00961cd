"""/v1/jobs: submit, list, show, cancel, logs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status
from fastapi.responses import StreamingResponse
from pydantic import WithJsonSchema

from gpudock.api.deps import CurrentUser, Jobs, TokenWatches
from gpudock.api.routing import OneHop, quick_read
from gpudock.api.schemas import ErrorOut, JobDetailOut, JobEventOut, JobOut, PreemptionOut
from gpudock.core.errors import InvalidInput
from gpudock.core.job import JobSpec, JobState
from gpudock.core.spec_schema import END
from gpudock.services.job_logs import STREAM_END
from gpudock.store.jobs import MAX_JOB_ID

_STATE_NAME = "|".join("".join(f"[{c}{c.lower()}]" for c in s.value) for s in JobState)
_STATE_ITEM = f" *(?:{_STATE_NAME}) *"
STATE_FILTER_PATTERN = f"^{_STATE_ITEM}(?:,{_STATE_ITEM})*{END}"
"""What ``parse_states`` accepts, for the schema (ASCII classes: no case-folding surprises)."""
StateFilter = Annotated[str, WithJsonSchema({"type": "string", "pattern": STATE_FILTER_PATTERN})]

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=OneHop)
ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorOut},
    404: {"model": ErrorOut},
    422: {"model": ErrorOut},
}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobOut, responses=ERRORS)
def submit(spec: JobSpec, user: CurrentUser, jobs: Jobs) -> JobOut:
    """Submit a job. 422 names the bad field, or says why it can never fit."""
    return JobOut.of(jobs.submit(spec, user))


PAGE_SIZE = 100


@router.get("", response_model=list[JobOut], responses=ERRORS)
@quick_read
def list_jobs(
    request: Request,
    response: Response,
    user: CurrentUser,
    jobs: Jobs,
    state: Annotated[
        list[StateFilter] | None,
        Query(description="filter by state (any case); repeat or comma-separate"),
    ] = None,
    queue: str | None = None,
    owner: Annotated[str | None, Query(alias="user")] = None,
    limit: Annotated[int, Query(ge=1, le=10000, description="page size")] = PAGE_SIZE,
    before: Annotated[
        int | None,
        Query(
            ge=1,
            le=MAX_JOB_ID + 1,
            description="cursor: only jobs with a smaller id (the X-Next-Cursor)",
        ),
    ] = None,
) -> list[JobOut]:
    """Jobs, newest first, one page at a time.

    When more jobs match, the response carries ``X-Next-Cursor: ID`` and a
    ``Link: <...>; rel="next"`` header; pass ``before=ID`` for the next page.
    """
    states = parse_states(state)
    found = jobs.query(user, states, queue, owner, limit + 1, before=before)
    page = found[:limit]
    if len(found) > limit:
        cursor = page[-1].id
        response.headers["X-Next-Cursor"] = str(cursor)
        next_url = request.url.remove_query_params("before").include_query_params(before=cursor)
        response.headers["Link"] = f'<{next_url.path}?{next_url.query}>; rel="next"'
    return [JobOut.of(j) for j in page]


@router.get("/{job_id}", response_model=JobDetailOut, responses=ERRORS)
@quick_read
def show(job_id: int, user: CurrentUser, jobs: Jobs) -> JobDetailOut:
    """One job with its allocation, pending reasons and state history."""
    found = jobs.get(job_id, user)
    job = JobOut.of(found)
    events = [JobEventOut.model_validate(e) for e in jobs.events(job_id, user)]
    protection = jobs.protection(found)
    preemption = None
    if protection is not None:
        preemption = PreemptionOut(
            preemptible=protection.preemptible,
            protected_until=protection.protected_until,
            protected_for=protection.protected_for,
            restart_cost_s=protection.restart_cost + protection.lost_work,
            lost_work_s=protection.lost_work,
        )
    # the job's fields as they are: no re-validation
    return JobDetailOut(**dict(job), events=events, preemption=preemption)


@router.post(
    "/{job_id}/cancel", response_model=JobOut, responses={**ERRORS, 409: {"model": ErrorOut}}
)
def cancel(job_id: int, user: CurrentUser, jobs: Jobs) -> JobOut:
    """Cancel: pending jobs end at once; running ones get SIGTERM, then SIGKILL."""
    return JobOut.of(jobs.cancel(job_id, user))


@router.get("/{job_id}/logs", responses=ERRORS, response_class=StreamingResponse)
def logs(
    job_id: int, user: CurrentUser, jobs: Jobs, watches: TokenWatches, follow: bool = False
) -> StreamingResponse:
    """Logs of every attempt; ``follow=true`` streams a running job's output until it ends,
    or until the caller's token is revoked or expires: then a last line
    ``[gpudock] stream ended: token revoked`` (or ``token expired``)."""
    reader = jobs.logs(job_id, user, follow=follow)  # NotFound before the response starts
    watch = watches.watch(user, lambda _: reader.close()) if follow else None

    def body() -> Iterator[bytes]:
        try:
            yield from reader
            if watch is not None and watch.reason is not None:
                yield f"{STREAM_END}{watch.reason}\n".encode()
        finally:
            if watch is not None:
                watch.cancel()
            reader.close()

    return StreamingResponse(body(), media_type="text/plain; charset=utf-8")


def parse_states(values: list[str] | None) -> list[JobState] | None:
    """State names in any (ASCII) case, comma-separated, blanks around them ignored,
    none empty: exactly ``STATE_FILTER_PATTERN``."""
    if not values:
        return None
    out = []
    for value in values:
        for item in value.split(","):
            name = item.strip(" ")
            if not name:
                raise InvalidInput(f"state: empty state name in {value!r}", "state")
            if not (name.isascii() and name.upper() in JobState.__members__):
                allowed = ", ".join(s.value for s in JobState)
                raise InvalidInput(
                    f"state: unknown state {name!r}; one of {allowed}", "state"
                ) from None
            out.append(JobState(name.upper()))
    return out or None
