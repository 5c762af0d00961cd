"""/v1/jobs/estimates: when each pending job is expected to start."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from gpudock.api.deps import CurrentUser, injected
from gpudock.api.routing import OneHop
from gpudock.api.schemas import ErrorOut
from gpudock.services.estimates import EstimateService
from gpudock.sim.start_times import StartEstimate
from gpudock.store.jobs import MAX_JOB_ID

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], route_class=OneHop)


class StartEstimateOut(BaseModel):
    job: int
    start: float | None = Field(description="expected start, epoch seconds; null = unknown")
    basis: Literal["now", "max_runtime", "queue_default", "unknown"] = Field(
        description="what the running jobs' ends came from (null start: 'unknown')"
    )
    detail: str

    @classmethod
    def of(cls, estimate: StartEstimate) -> StartEstimateOut:
        return cls(
            job=estimate.job_id, start=estimate.start, basis=estimate.basis, detail=estimate.detail
        )


@router.get(
    "/estimates",
    response_model=list[StartEstimateOut],
    responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)
def estimates(
    user: CurrentUser,
    service: Annotated[EstimateService, injected(EstimateService)],
    job: Annotated[
        int | None, Query(ge=1, le=MAX_JOB_ID, description="only this job (404 if not yours)")
    ] = None,
) -> list[StartEstimateOut]:
    """Estimated start of each of your pending jobs: the queue replayed through the
    scheduler, with each running job's ``max_runtime`` as its remaining time."""
    return [StartEstimateOut.of(e) for e in service.starts(user, job)]
