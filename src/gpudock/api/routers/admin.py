"""/v1/admin/config: read, diff and apply the live scheduling config (admins only).

Thin: ``services/admin.py`` validates and applies. A refused config answers
422 naming every error with its path (``field`` lists the paths); the config
in force is then unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from gpudock.api.deps import CurrentUser, injected
from gpudock.api.routing import OneHop
from gpudock.api.schemas import ErrorOut
from gpudock.cluster_config import Change, ClusterConfig
from gpudock.services.admin import AdminService

router = APIRouter(prefix="/v1/admin/config", tags=["admin"], route_class=OneHop)

REFUSED: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorOut, "description": "not an admin"},
    422: {
        "model": ErrorOut,
        "description": "refused whole: every error as 'path: message' (field: the paths); "
        "unknown users, groups or nodes, guarantees above the cluster's GPUs, a removed "
        "priority class that unfinished jobs use",
    },
}


class ChangeOut(BaseModel):
    path: str = Field(description="e.g. queues.queues[vision].limit.gpus")
    before: Any = Field(default=None, description="null: added")
    after: Any = Field(default=None, description="null: removed")

    @classmethod
    def of(cls, change: Change) -> ChangeOut:
        return cls(path=change.path, before=change.before, after=change.after)


class ConfigOut(BaseModel):
    version: int = Field(description="the applied config's id; 0: the config file's")
    applied_at: float | None = None
    applied_by: str | None = Field(default=None, description="a user, or sighup")
    source: str = Field(description="file, api or sighup")
    config: dict[str, Any] = Field(description="the scheduling config, as PUT accepts it")


class AppliedOut(BaseModel):
    version: int
    changes: list[ChangeOut]


class DiffOut(BaseModel):
    changes: list[ChangeOut]


Admin = Annotated[AdminService, injected(AdminService)]


@router.get("", response_model=ConfigOut, responses={403: REFUSED[403]})
def get_config(principal: CurrentUser, admin: Admin) -> ConfigOut:
    """The scheduling config in force: priority classes, queues, node labels and taints."""
    now = admin.current(principal)
    return ConfigOut(
        version=now.version,
        applied_at=now.applied_at,
        applied_by=now.applied_by,
        source=now.source,
        config=now.config.document(),
    )


@router.put("", response_model=AppliedOut, responses=REFUSED)
def put_config(body: ClusterConfig, principal: CurrentUser, admin: Admin) -> AppliedOut:
    """Replace the scheduling config in one step; it takes effect on the next cycle.

    Stored (a restart keeps it) and recorded as a ``config.applied`` event. No
    running job is stopped by it.
    """
    version, changes = admin.apply(principal, body)
    return AppliedOut(version=version, changes=[ChangeOut.of(c) for c in changes])


@router.post("/diff", response_model=DiffOut, responses=REFUSED)
def diff_config(body: ClusterConfig, principal: CurrentUser, admin: Admin) -> DiffOut:
    """What a PUT of this config would change, checked by the same rules; changes nothing."""
    return DiffOut(changes=[ChangeOut.of(c) for c in admin.diff(principal, body)])
