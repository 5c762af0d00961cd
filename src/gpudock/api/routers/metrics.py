"""``GET /metrics``: Prometheus exposition, open or behind ``metrics.token``.

Prometheus scrapes without gpudock's API tokens: by default the endpoint is
open on the API port (it shows job ids, users and queues, no secrets). With
``metrics.token`` set in the server config, a scrape must send
``Authorization: Bearer <that token>`` (Prometheus' ``authorization`` scrape
option); anything else gets 401.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Header, Response

from gpudock.api.deps import Ctx
from gpudock.api.routing import OneHop
from gpudock.core.errors import Unauthorized
from gpudock.metrics.collector import CONTENT_TYPE, scrape

router = APIRouter(tags=["metrics"], route_class=OneHop)


@router.get("/metrics", include_in_schema=False)
def metrics(ctx: Ctx, authorization: Annotated[str | None, Header()] = None) -> Response:
    """Every gpudock metric, computed now (a few read-only queries) by the controller's
    process (``collector.scrape``)."""
    token = ctx.config.metrics.token
    if token is not None:
        sent = (authorization or "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(sent.encode(), token.encode()):
            raise Unauthorized("/metrics needs 'Authorization: Bearer <metrics.token>'")
    return Response(scrape(ctx), media_type=CONTENT_TYPE)
