"""/v1/tokens: admins create tokens; everyone lists and revokes their own (``services/auth.py``)."""

from __future__ import annotations

from fastapi import APIRouter, status

from gpudock.api.deps import Auth, Ctx, CurrentUser
from gpudock.api.routing import OneHop
from gpudock.api.schemas import ErrorOut, TokenCreate, TokenInfoOut, TokenOut

router = APIRouter(prefix="/v1/tokens", tags=["auth"], route_class=OneHop)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TokenOut,
    responses={403: {"model": ErrorOut}, 404: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)
def create(body: TokenCreate, user: CurrentUser, auth: Auth, ctx: Ctx) -> TokenOut:
    """Create a token for ``user`` (admin only), or a node token for a node's agent
    (``node``). The secret is shown only once."""
    info, secret = auth.create_token(
        user, body.user, body.admin, body.name, body.expires, node=body.node
    )
    return TokenOut(**TokenInfoOut.of(info, ctx.clock()).model_dump(), token=secret)


@router.get("", response_model=list[TokenInfoOut], responses={403: {"model": ErrorOut}})
def list_tokens(
    principal: CurrentUser, auth: Auth, ctx: Ctx, user: str | None = None
) -> list[TokenInfoOut]:
    """Tokens, oldest first, never their secrets: a user's own; an admin's pick (``user``)
    or everyone's. Revoked and expired tokens are listed with their ``state``."""
    now = ctx.clock()
    return [TokenInfoOut.of(info, now) for info in auth.list_tokens(principal, user)]


@router.delete(
    "/{token_id}",
    response_model=TokenInfoOut,
    responses={404: {"model": ErrorOut}, 409: {"model": ErrorOut}},
)
def revoke(token_id: int, principal: CurrentUser, auth: Auth, ctx: Ctx) -> TokenInfoOut:
    """Revoke a token (its next use gets 401 ``token revoked at ...``). Users may revoke
    their own; admins anyone's. 409 if already revoked or the last active admin token."""
    return TokenInfoOut.of(auth.revoke(principal, token_id), ctx.clock())
