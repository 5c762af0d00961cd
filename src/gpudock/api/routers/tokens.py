"""/v1/tokens: admins create user tokens."""

from __future__ import annotations

from fastapi import APIRouter, status

from gpudock.api.deps import Auth, CurrentUser
from gpudock.api.schemas import ErrorOut, TokenCreate, TokenOut

router = APIRouter(prefix="/v1/tokens", tags=["auth"])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TokenOut,
    responses={403: {"model": ErrorOut}, 422: {"model": ErrorOut}},
)
def create(body: TokenCreate, user: CurrentUser, auth: Auth) -> TokenOut:
    """Create a token for ``user`` (admin only). The token is shown only once."""
    token = auth.create_token(user, body.user, body.admin)
    return TokenOut(user=body.user, admin=body.admin, token=token)
