"""/v1/jobs/{id}: hold, release, requeue, update (PATCH) and exec (and exec -it: ``job_tty``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, field_validator

from gpudock.api.deps import Ctx, CurrentUser, TokenWatches, injected
from gpudock.api.routers import job_tty
from gpudock.api.routing import OneHop
from gpudock.api.schemas import ErrorOut, JobOut
from gpudock.core import spec_schema as schema
from gpudock.core.job import MAX_ARGS, MAX_TEXT
from gpudock.services.job_controls import JobControls
from gpudock.services.job_exec import JobExec, ndjson

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=OneHop)


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


NOT_FOUND: dict[int | str, dict[str, Any]] = {404: _error("no such job, or another user's")}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: _error("the job's state or hold does not allow it; nothing changed")
}


Controls = Annotated[JobControls, injected(JobControls)]


class JobUpdate(BaseModel):
    """What ``PATCH /v1/jobs/{id}`` may change; absent fields stay as they are, and at
    least one must be given (``{}`` changes nothing: 422)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    priority_class: str | None = Field(default=None, description="a new priority class")
    max_runtime: StrictInt | StrictFloat | str | None = Field(
        default=None,
        description="seconds, or '2h'; a running job's may only be lowered",
        json_schema_extra=schema.NUMBER_OR_TEXT,
    )
    gpus: int | None = Field(default=None, ge=0, le=1024, strict=True)


class ExecRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(
        min_length=1,
        max_length=MAX_ARGS,
        description="argv, run without a shell",
        json_schema_extra={"items": {"type": "string", "maxLength": MAX_TEXT}},
    )

    @field_validator("command")
    @classmethod
    def _text(cls, value: list[str]) -> list[str]:
        """Docker refuses NUL characters in argv; no argument over ``MAX_TEXT``."""
        for item in value:
            if "\x00" in item:
                raise ValueError("command must not contain NUL (\\x00) characters")
            if len(item) > MAX_TEXT:
                raise ValueError(f"command holds an argument of {len(item)} characters")
        return value


@router.post("/{job_id}/hold", response_model=JobOut, responses={**NOT_FOUND, **CONFLICT})
def hold(job_id: int, user: CurrentUser, controls: Controls) -> JobOut:
    """Hold a PENDING job: the scheduler skips it until it is released."""
    return JobOut.of(controls.hold(job_id, user))


@router.post("/{job_id}/release", response_model=JobOut, responses={**NOT_FOUND, **CONFLICT})
def release(job_id: int, user: CurrentUser, controls: Controls) -> JobOut:
    """Release a held job: it is scheduled again."""
    return JobOut.of(controls.release(job_id, user))


@router.post(
    "/{job_id}/requeue",
    response_model=JobOut,
    responses={**NOT_FOUND, **CONFLICT, 403: _error("force without being an admin")},
)
def requeue(job_id: int, user: CurrentUser, controls: Controls, force: bool = False) -> JobOut:
    """Stop an active job's container and put it back in the queue (no retry used).

    ``force`` (admins): requeue at once a job whose node is lost, without
    stopping its container (no one can reach it): the caller vouches that it
    stopped. For a job on an unwatched node (no agent) that waits for the
    operator.
    """
    if force:
        return JobOut.of(controls.force_requeue(job_id, user))
    return JobOut.of(controls.requeue(job_id, user))


@router.patch(
    "/{job_id}",
    response_model=JobOut,
    responses={
        **NOT_FOUND,
        **CONFLICT,
        403: _error("a class or queue the caller may not use, or not the owner"),
        422: _error("an invalid field, or a shape no node can ever hold"),
    },
)
def update(job_id: int, body: JobUpdate, user: CurrentUser, controls: Controls) -> JobOut:
    """Change a PENDING job (re-validated as a submit); a running one: lower max_runtime."""
    changes = {k: getattr(body, k) for k in body.model_fields_set}
    return JobOut.of(controls.update(job_id, changes, user))


@router.post(
    "/{job_id}/exec",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": 'NDJSON: {"stream", "data" (base64)} per chunk, then {"exit_code"}',
            "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
        },
        **NOT_FOUND,
        **CONFLICT,
        403: _error("not the job's owner"),
        422: _error("an invalid command, or one the engine refused to start"),
    },
)
def exec_command(
    job_id: int, body: ExecRequest, user: CurrentUser, ctx: Ctx, watches: TokenWatches
) -> StreamingResponse:
    """Run a command in the job's running container, as its owner; streams its output.

    The stream ends early, with ``{"error": "session ended: token revoked"}`` (or
    ``token expired``), when the caller's token dies; the command is not killed.
    """
    output = JobExec(ctx).start(job_id, body.command, user)
    watch = watches.watch(user, lambda _: output.interrupt())

    def body_lines() -> Iterator[bytes]:
        try:
            yield from ndjson(output, lambda: watch.reason)
        finally:
            watch.cancel()

    return StreamingResponse(body_lines(), media_type="application/x-ndjson")


router.include_router(job_tty.router)  # WS /v1/jobs/{id}/exec/tty (exec -it)
