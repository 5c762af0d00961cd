"""/v1/events: the durable event log, paged by cursor."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field, WithJsonSchema

from gpudock.api.deps import CurrentUser, injected
from gpudock.api.routing import OneHop
from gpudock.api.schemas import ErrorOut
from gpudock.services.events import TYPE_FILTER_PATTERN, TYPES_HELP, EventService, parse_types
from gpudock.store.events import MAX_EVENT_ID
from gpudock.store.jobs import MAX_JOB_ID

router = APIRouter(prefix="/v1/events", tags=["events"], route_class=OneHop)
ERRORS: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorOut},
    404: {"model": ErrorOut},
    422: {"model": ErrorOut},
}


class EventOut(BaseModel):
    id: int = Field(description="monotonic; the paging cursor")
    at: float = Field(description="unix seconds")
    type: str = Field(description=TYPES_HELP)
    job: int | None
    user: str | None
    queue: str | None
    node: str | None
    payload: dict[str, Any]


class EventPageOut(BaseModel):
    events: list[EventOut] = Field(description="oldest first")
    next: int = Field(description="pass as since= to get the events after these")


@router.get("", response_model=EventPageOut, responses=ERRORS)
def list_events(
    user: CurrentUser,
    service: Annotated[EventService, injected(EventService)],
    since: Annotated[int, Query(ge=0, le=MAX_EVENT_ID, description="last id seen")] = 0,
    job: Annotated[int | None, Query(ge=1, le=MAX_JOB_ID)] = None,
    type: Annotated[
        list[Annotated[str, WithJsonSchema({"type": "string", "pattern": TYPE_FILTER_PATTERN})]]
        | None,
        Query(description=f"repeat or comma-separate: {TYPES_HELP}"),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventPageOut:
    """Events after cursor ``since``, oldest first. Users see their own jobs' events
    and node/GPU events; admins see all."""
    events, cursor = service.page(user, since, job, parse_types(type), limit)
    return EventPageOut(
        events=[
            EventOut(
                id=e.id,
                at=e.at,
                type=e.type,
                job=e.job_id,
                user=e.user,
                queue=e.queue,
                node=e.node,
                payload=e.payload,
            )
            for e in events
        ],
        next=cursor,
    )
