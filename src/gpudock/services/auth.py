"""Authentication: bearer tokens mapped to a ``Principal`` (user + admin flag)."""

from __future__ import annotations

import re

from gpudock.core.errors import Forbidden, InvalidInput, Unauthorized
from gpudock.core.spec_schema import USER_PATTERN
from gpudock.runtime.context import RuntimeContext
from gpudock.store import tokens as token_store
from gpudock.store.tokens import Principal

_USER_RE = re.compile(USER_PATTERN)


class AuthService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def authenticate(self, header: str | None) -> Principal:
        """Resolve an ``Authorization: Bearer <token>`` header; raise ``Unauthorized``."""
        if not header:
            raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("Authorization header must be 'Bearer <token>'")
        with self.ctx.db.read() as session:
            principal = token_store.lookup(session, token.strip())
        if principal is None:
            raise Unauthorized("invalid or revoked token")
        return principal

    def create_token(self, principal: Principal, user: str, admin: bool = False) -> str:
        """A new token for ``user``; only admins may create tokens."""
        if not principal.is_admin:
            raise Forbidden("only an admin can create tokens")
        if not _USER_RE.fullmatch(user):
            raise InvalidInput(
                f"user {user!r} must be 1-64 letters, digits, '_', '.', '@', '-'", field="user"
            )
        with self.ctx.db.write() as session:
            return token_store.create_token(session, user, admin, self.ctx.clock())
