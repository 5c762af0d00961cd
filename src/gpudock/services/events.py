"""Event log use cases: page through the events a principal may see."""

from __future__ import annotations

import re
from collections.abc import Sequence

from gpudock.core.errors import InvalidInput, NotFound
from gpudock.core.events import EventType
from gpudock.runtime.context import RuntimeContext
from gpudock.store import events as event_store
from gpudock.store import jobs as job_store
from gpudock.store.tokens import Principal

TYPES_HELP = ", ".join(t.value for t in EventType)


def _type_filter_pattern() -> str:
    names = sorted({t.value for t in EventType} | {t.value.split(".")[0] for t in EventType})
    item = rf"\s*(?:{'|'.join(re.escape(n) for n in names)})\s*"
    return f"^{item}(?:,{item})*$"


TYPE_FILTER_PATTERN = _type_filter_pattern()
"""What ``parse_types`` accepts (one ``type`` value), for the OpenAPI schema."""


def parse_types(values: Sequence[str] | None) -> list[EventType]:
    """Event types from repeated or comma-separated ``type`` values; ``InvalidInput`` if unknown.

    ``job`` (or ``node``, ``gpu``) alone stands for every type with that prefix.
    """
    out: list[EventType] = []
    for value in values or ():
        for part in (p.strip() for p in value.split(",")):
            if not part:
                raise InvalidInput(f"empty event type in {value!r}; one of: {TYPES_HELP}", "type")
            matched = [t for t in EventType if t.value == part or t.value.startswith(part + ".")]
            if not matched:
                raise InvalidInput(f"unknown event type {part!r}; one of: {TYPES_HELP}", "type")
            out.extend(t for t in matched if t not in out)
    return out


class EventService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def page(
        self,
        principal: Principal,
        since: int = 0,
        job_id: int | None = None,
        types: Sequence[EventType] = (),
        limit: int = 100,
    ) -> tuple[list[event_store.Event], int]:
        """Events after cursor ``since`` that ``principal`` may see, and the next cursor.

        Users see their own jobs' events and the node and GPU events; admins
        see every event. ``job_id`` names a job the principal may see (else
        ``NotFound``). The next cursor is the last event's id, or ``since``
        when there is none yet: poll again with it.
        """
        with self.ctx.db.read() as session:
            if job_id is not None:
                job = job_store.get_job(session, job_id)
                if job is None or not (principal.is_admin or job.user == principal.user):
                    raise NotFound(f"job {job_id} not found")
            events = event_store.list_events(
                session,
                since=since,
                limit=limit,
                job_id=job_id,
                types=types,
                visible_to=None if principal.is_admin else principal.user,
            )
        return events, (events[-1].id if events else since)
