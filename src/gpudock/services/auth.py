"""Authentication: bearer tokens (or the UI's cookie) mapped to a ``Principal``."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from gpudock.core.errors import Forbidden, InvalidInput, Unauthorized
from gpudock.runtime.context import RuntimeContext
from gpudock.store import tokens as token_store
from gpudock.store.tokens import Principal

_USER_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.@-]{0,63}$")

UI_COOKIE = "gpudock_token"
"""The HttpOnly cookie ``POST /ui/login`` sets; it holds the token itself."""
UI_HEADER = "X-Gpudock-UI"
"""Header the UI's scripts send with every state-changing request (CSRF guard)."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


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
        return self.authenticate_token(token.strip())

    def authenticate_token(self, token: str) -> Principal:
        """The principal of a plain token; ``Unauthorized`` when unknown or revoked."""
        with self.ctx.db.read() as session:
            principal = token_store.lookup(session, token)
        if principal is None:
            raise Unauthorized("invalid or revoked token")
        return principal

    def authenticate_cookie(
        self, token: str, method: str, host: str | None, origin: str | None, ui_header: str | None
    ) -> Principal:
        """The principal of the UI's cookie, refusing cross-site state changes.

        The cookie is ``SameSite=Strict``; on top of that a request that is not
        GET/HEAD/OPTIONS must carry ``X-Gpudock-UI`` (a header no cross-site
        form can set without a CORS preflight, which this server never grants)
        and, when the browser sends ``Origin``, one whose host is this server's.
        """
        if method.upper() not in SAFE_METHODS:
            check_same_origin(host, origin, ui_header)
        return self.authenticate_token(token)

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


def check_same_origin(host: str | None, origin: str | None, ui_header: str | None) -> None:
    """Raise ``Forbidden`` unless a cookie-authenticated change comes from the UI itself."""
    if not ui_header:
        raise Forbidden(
            "cross-site request refused: a request authenticated by the UI's cookie must "
            f"carry the {UI_HEADER} header; API clients send 'Authorization: Bearer <token>'"
        )
    if origin is not None and (host is None or urlsplit(origin).netloc.lower() != host.lower()):
        raise Forbidden(f"cross-site request refused: origin {origin!r} is not this server")
