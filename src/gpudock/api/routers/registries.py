"""/v1/registries: each user's own logins to private registries (``services/registries.py``).

Answers carry registry, username and when; never the password.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, Field, SecretStr

from gpudock.api.deps import CurrentUser, injected
from gpudock.api.routing import OneHop
from gpudock.api.schemas import ErrorOut
from gpudock.core.image_ref import REGISTRY_PATTERN
from gpudock.core.registries import MAX_REGISTRY_LENGTH
from gpudock.services.registries import MAX_PASSWORD_LENGTH, USERNAME_PATTERN, RegistryService
from gpudock.store.registries import StoredLogin

router = APIRouter(prefix="/v1/registries", tags=["registries"], route_class=OneHop)


Registries = Annotated[RegistryService, injected(RegistryService)]
RegistryName = Annotated[
    str,
    Path(
        description="host[:port] as images name it, e.g. registry.example.com or 127.0.0.1:5000",
        max_length=MAX_REGISTRY_LENGTH,
        json_schema_extra={"pattern": REGISTRY_PATTERN},
    ),
]


class RegistryLoginIn(BaseModel):
    model_config = {"extra": "forbid"}

    username: str = Field(
        description="1-255 characters, no control characters",
        json_schema_extra={"pattern": USERNAME_PATTERN},
    )
    password: SecretStr = Field(  # lengths checked by the service, in its own words
        description="stored encrypted; never shown",
        json_schema_extra={"minLength": 1, "maxLength": MAX_PASSWORD_LENGTH},
    )


class RegistryLoginOut(BaseModel):
    """A stored login, without its password."""

    registry: str
    username: str
    created_at: float = Field(description="when it was stored (unix seconds)")

    @classmethod
    def of(cls, stored: StoredLogin) -> RegistryLoginOut:
        return cls(registry=stored.registry, username=stored.username, created_at=stored.created_at)


@router.get("", response_model=list[RegistryLoginOut])
def list_logins(principal: CurrentUser, registries: Registries) -> list[RegistryLoginOut]:
    """Your registry logins, by registry; never their passwords."""
    return [RegistryLoginOut.of(s) for s in registries.list(principal)]


@router.put(
    "/{registry}",
    response_model=RegistryLoginOut,
    responses={422: {"model": ErrorOut}},
)
def login(
    registry: RegistryName,
    body: RegistryLoginIn,
    principal: CurrentUser,
    registries: Registries,
) -> RegistryLoginOut:
    """Store (or replace) your login to ``registry``: your jobs' pulls from it use it."""
    stored = registries.login(principal, registry, body.username, body.password)
    return RegistryLoginOut.of(stored)


@router.delete(
    "/{registry}",
    response_model=RegistryLoginOut,
    responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)
def logout(
    registry: RegistryName, principal: CurrentUser, registries: Registries
) -> RegistryLoginOut:
    """Remove your login to ``registry``; 404 if you have none."""
    return RegistryLoginOut.of(registries.logout(principal, registry))
