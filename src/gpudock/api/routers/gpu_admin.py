"""/v1/gpus/{uuid}/cordon and uncordon (admins), /v1/mig/plan: thin over services/gpu_admin."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from gpudock.api.deps import CurrentUser, injected
from gpudock.api.routing import OneHop
from gpudock.api.schemas import ErrorOut, GpuOut
from gpudock.core.mig import PROFILE_PATTERN
from gpudock.core.mig_plan import MigPlan, describe
from gpudock.services.gpu_admin import GpuAdminService

router = APIRouter(tags=["inventory"], route_class=OneHop)
WANT_SCHEMA = PROFILE_PATTERN.removesuffix("$") + "=[0-9]{1,4}$"
"""A ``want`` the plan takes: a MIG profile name, ``=``, a count (the schema says it; the
service's messages say what is wrong)."""


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorOut, "description": description}


Service = Annotated[GpuAdminService, injected(GpuAdminService)]
CHANGES: dict[int | str, dict[str, Any]] = {
    403: _error("not an admin"),
    404: _error("no such GPU"),
    409: _error("the GPU is not in a state this changes; nothing changed"),
}


class CordonIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(default=None, max_length=200, description="why, for the record")


@router.post("/v1/gpus/{uuid}/cordon", response_model=GpuOut, responses=CHANGES)
def cordon(
    uuid: str, principal: CurrentUser, service: Service, body: CordonIn | None = None
) -> GpuOut:
    """Take a GPU out of placement (its running jobs go on). Admins only."""
    return GpuOut.of(service.cordon(uuid, principal, body.reason if body else None))


@router.post("/v1/gpus/{uuid}/uncordon", response_model=GpuOut, responses=CHANGES)
def uncordon(uuid: str, principal: CurrentUser, service: Service) -> GpuOut:
    """Bring back a cordoned GPU, or one a health event quarantined. Admins only."""
    return GpuOut.of(service.uncordon(uuid, principal))


class LayoutOut(BaseModel):
    node: str
    index: int
    uuid: str
    name: str
    layout: str = Field(description="profile@first memory slice, e.g. 3g.40gb@0 + 1g.10gb@4")
    profiles: list[str]
    commands: list[str] = Field(description="run on the node, in order, as root")


class UnmetOut(BaseModel):
    profile: str
    count: int
    reason: str


class MigPlanOut(BaseModel):
    layouts: list[LayoutOut]
    kept: dict[str, int] = Field(description="idle MIG devices that already serve {profile: n}")
    unmet: list[UnmetOut]

    @classmethod
    def of(cls, plan: MigPlan) -> MigPlanOut:
        return cls(
            layouts=[
                LayoutOut(
                    node=lay.gpu.node,
                    index=lay.gpu.index,
                    uuid=lay.gpu.uuid,
                    name=lay.gpu.name,
                    layout=describe(lay.profiles),
                    profiles=[p.profile.name for p in lay.profiles],
                    commands=list(lay.commands),
                )
                for lay in plan.layouts
            ],
            kept=plan.kept,
            unmet=[UnmetOut(profile=p, count=n, reason=why) for p, (n, why) in plan.unmet.items()],
        )


@router.get(
    "/v1/mig/plan",
    response_model=MigPlanOut,
    responses={422: _error("a malformed want")},
)
def mig_plan(
    _: CurrentUser,
    service: Service,
    want: Annotated[
        list[str],
        Query(
            description="more demand: PROFILE=COUNT, repeatable",
            json_schema_extra={"items": {"type": "string", "pattern": WANT_SCHEMA}},
        ),
    ] = [],  # noqa: B006
) -> MigPlanOut:
    """A suggested MIG layout per GPU for pending MIG jobs (and ``want``): the
    ``nvidia-smi mig`` commands an admin would run. gpudock changes nothing."""
    return MigPlanOut.of(service.mig_plan(want))
