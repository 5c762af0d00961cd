"""Authentication and the token lifecycle: bearer tokens (or the UI's cookie) mapped to a
``Principal``.

Rules:

* a request's token must be active: an unknown token is ``Unauthorized``
  (401) ``invalid token``; a revoked or expired one is 401 saying which and
  when (``token revoked at ...``, ``token expired at ...``, UTC ISO 8601);
* each use records ``last_used_at``, written at most once a minute per token;
* a process answers from its copy of a token row for up to ``CACHE_TTL``
  (``store/tokens.py: TokenCache``): a revocation takes effect at once in the
  process that made it and within ``CACHE_TTL`` in every other; an expiry at
  once everywhere;
* only admins create tokens (for any user, admin or not): a user's stolen
  token must not be able to mint fresh ones that outlive its revocation;
* users list and revoke their own tokens; admins anyone's. Another user's
  token is ``NotFound`` to a user, as jobs are. Revoking a revoked token is
  ``Conflict`` (409), and so is revoking the last active admin token;
* ``expires`` is a positive duration (``30d``) up to ``MAX_EXPIRES``;
  without it a token never expires;
* what a token opened ends with it: every long-lived request (exec, exec -it,
  logs --follow, the dashboard's session) asks ``token_ended`` again, through
  one ``TokenWatch`` per server process (``services/token_watch.py``), and
  ends with the reason (``token revoked``, ``token expired``).

The time is ``ctx.clock()``, so tests move it instead of waiting.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime
from urllib.parse import urlsplit

from sqlalchemy.orm import Session

from gpudock.core.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthorized
from gpudock.core.spec_schema import EXPIRES_PATTERN, TOKEN_NAME_PATTERN
from gpudock.core.units import parse_duration
from gpudock.core.users import USER_HELP, USER_PATTERN
from gpudock.runtime.context import RuntimeContext
from gpudock.store import inventory as inv_store
from gpudock.store import tokens as token_store
from gpudock.store.tokens import Principal, TokenInfo

MAX_EXPIRES = 10 * 365 * 86400.0  # ten years
UI_COOKIE = "gpudock_token"
"""The HttpOnly cookie ``POST /ui/login`` sets; it holds the token itself."""
UI_HEADER = "X-Gpudock-UI"
"""Header the UI's scripts send with every state-changing request (CSRF guard)."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_NAME_RE = re.compile(TOKEN_NAME_PATTERN)
_EXPIRES_RE = re.compile(EXPIRES_PATTERN)


def iso(at: float) -> str:
    """``at`` (unix seconds) as ISO 8601 in UTC, e.g. ``2026-12-03T09:21:09+00:00``."""
    return datetime.fromtimestamp(at, tz=UTC).isoformat(timespec="seconds")


def parse_expires(value: str | float | None) -> float | None:
    """Seconds until expiry from ``30d``/``12h``/seconds; None: never. ``InvalidInput`` else."""
    if value is None:
        return None
    try:
        seconds = parse_duration(value)
    except ValueError as exc:
        raise InvalidInput(f"expires: {exc}", field="expires") from None
    if seconds <= 0:
        raise InvalidInput(
            f"expires must be a positive duration such as 30d, got {value!r}; "
            "leave it out for a token that never expires",
            field="expires",
        )
    if isinstance(value, str) and not _EXPIRES_RE.fullmatch(value):  # e.g. "1e3", "+5"
        raise InvalidInput(
            f"expires: write the lifetime as amounts with s, m, h or d (30d, 1h30m) or as "
            f"plain seconds, got {value!r}",
            field="expires",
        )
    if seconds > MAX_EXPIRES:
        raise InvalidInput(
            f"expires must be at most 3650d (ten years), got {value!r}", field="expires"
        )
    return seconds


def end_reason(revoked_at: float | None, expires_at: float | None, now: float) -> str | None:
    """``token revoked`` or ``token expired`` (revoked wins), or None while it is active."""
    if revoked_at is not None:
        return "token revoked"
    if expires_at is not None and now >= expires_at:
        return "token expired"
    return None


def token_ended(session: Session, token_id: int, now: float) -> str | None:
    """Whether token ``token_id`` still holds at ``now``: None, or why not (``end_reason``;
    a token with no row is ``token revoked``). One read by primary key, nothing written."""
    found = token_store.lifetimes(session, [token_id]).get(token_id)
    return "token revoked" if found is None else end_reason(*found, now)


class AuthService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def authenticate(self, header: str | None) -> Principal:
        """Resolve an ``Authorization: Bearer <token>`` header; raise ``Unauthorized``."""
        return self.authenticate_token(bearer_token(header))

    def authenticate_user(self, header: str | None) -> Principal:
        """As ``authenticate``, refusing a node token (``Forbidden``): it acts for an agent only."""
        principal = self.authenticate(header)
        refuse_node_token(principal)
        return principal

    def authenticate_token(self, token: str) -> Principal:
        """The principal of a plain token; ``Unauthorized`` when unknown, revoked or expired.

        Answers from this process's ``ctx.tokens`` when it holds a fresh copy
        (``TokenCache``: a revocation elsewhere is seen within ``CACHE_TTL``),
        else with one indexed read, which it then caches.
        """
        cached = self.cached_principal(token)
        if cached is not None:
            return cached
        now, cache, digest = self.ctx.clock(), self.ctx.tokens, token_store.hash_token(token)
        generation, read_at = cache.generation, cache.now()
        with self.ctx.db.read() as session:
            info = token_store.find_hash(session, digest)
        if info is None:
            raise Unauthorized("invalid token")
        _refuse_inactive(info, now)
        if token_store.due_for_touch(info, now):
            with self.ctx.db.write() as session:
                token_store.touch(session, info.id, now)
            info = replace(info, last_used_at=now)
        cache.put(digest, info, generation, read_at)
        return info.principal

    def cached_principal(self, token: str) -> Principal | None:
        """``authenticate_token`` from the cache alone, with no I/O: the principal,
        ``Unauthorized`` for a cached revoked or expired token, or None (not cached,
        or its last use is due to be written): then call ``authenticate_token``."""
        info = self.ctx.tokens.get(token_store.hash_token(token))
        if info is None:
            return None
        now = self.ctx.clock()
        _refuse_inactive(info, now)
        return None if token_store.due_for_touch(info, now) else info.principal

    def authenticate_cookie(
        self, token: str, method: str, host: str | None, origin: str | None, ui_header: str | None
    ) -> Principal:
        """The principal of the UI's cookie, refusing cross-site state changes.

        The cookie is ``SameSite=Strict``; on top of that a request that is not
        GET/HEAD/OPTIONS must carry ``X-Gpudock-UI`` (a header no cross-site
        form can set without a CORS preflight, which this server never grants)
        and, when the browser sends ``Origin``, one whose host is this server's.
        """
        return self.authenticate_token(cookie_token(token, method, host, origin, ui_header))

    def create_token(
        self,
        principal: Principal,
        user: str | None,
        admin: bool = False,
        name: str | None = None,
        expires: str | float | None = None,
        node: str | None = None,
    ) -> tuple[TokenInfo, str]:
        """A new token for ``user`` and its secret (shown once); admins only.

        ``node``: a node token for that registered node's agent (its user is
        ``agent@NODE`` unless given; never an admin). ``NotFound`` for a node
        that is not registered.
        """
        if not principal.is_admin:
            raise Forbidden("only an admin can create tokens")
        if node is not None:
            user = user or f"agent@{node}"
            self._check_node(node, admin)
        if user is None:
            raise InvalidInput("give the user the token acts as", field="user")
        if not USER_PATTERN.fullmatch(user):
            raise InvalidInput(f"user {user!r} must be {USER_HELP}", field="user")
        if name is not None and not _NAME_RE.fullmatch(name):
            raise InvalidInput(
                f"name {name!r} must be 1-64 letters, digits, spaces or '_.@:+-', "
                "starting with a letter or digit",
                field="name",
            )
        lifetime = parse_expires(expires)
        now = self.ctx.clock()
        with self.ctx.db.write() as session:
            return token_store.issue_token(
                session,
                user,
                admin,
                now,
                name=name,
                expires_at=None if lifetime is None else now + lifetime,
                created_by=principal.user,
                node=node,
            )

    def _check_node(self, node: str, admin: bool) -> None:
        if admin:
            raise InvalidInput("a node token acts for its node's agent only; it cannot be admin")
        with self.ctx.db.read() as session:
            names = [n.name for n in inv_store.list_nodes(session)]
        if node not in names:
            raise NotFound(f"unknown node {node!r} (nodes: {', '.join(names) or 'none'})")

    def list_tokens(self, principal: Principal, user: str | None = None) -> list[TokenInfo]:
        """Tokens of ``user`` (all users' for admins without ``user``); users: their own."""
        if not principal.is_admin:
            if user is not None and user != principal.user:
                raise Forbidden(f"users may list only their own tokens, not {user!r}'s")
            user = principal.user
        with self.ctx.db.read() as session:
            return token_store.list_tokens(session, user)

    def revoke(self, principal: Principal, token_id: int) -> TokenInfo:
        """Revoke a token now and return it; see the module rules for the errors."""
        now = self.ctx.clock()
        with self.ctx.db.write() as session:
            info = token_store.get_token(session, token_id)
            if info is None or not (principal.is_admin or info.user == principal.user):
                raise NotFound(f"token {token_id} not found")
            if info.revoked_at is not None:
                raise Conflict(f"token {token_id} was already revoked at {iso(info.revoked_at)}")
            if info.is_admin and token_store.active_admin_tokens(session, now) == [token_id]:
                raise Conflict(
                    f"token {token_id} is the last active admin token; "
                    "create another admin token before revoking it"
                )
            if not token_store.revoke(session, token_id, now):  # writers are serialized
                raise Conflict(f"token {token_id} was already revoked")
        self.ctx.tokens.forget(token_id)  # at once here; other processes within CACHE_TTL
        return replace(info, revoked_at=now)


def refuse_node_token(principal: Principal) -> None:
    """``Forbidden`` for a node token: it acts only for its node's agent."""
    if principal.node is not None:
        raise Forbidden(
            "a node token acts only for its node's agent (/v1/agent/...); use a user's token"
        )


def cookie_token(
    token: str, method: str, host: str | None, origin: str | None, ui_header: str | None
) -> str:
    """The UI cookie's token, after ``authenticate_cookie``'s cross-site checks (no I/O)."""
    if method.upper() not in SAFE_METHODS:
        check_same_origin(host, origin, ui_header)
    return token


def bearer_token(header: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; ``Unauthorized`` else."""
    if not header:
        raise Unauthorized("missing Authorization header; send 'Authorization: Bearer <token>'")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("Authorization header must be 'Bearer <token>'")
    return token.strip()


def _refuse_inactive(info: TokenInfo, now: float) -> None:
    """``Unauthorized`` saying when, for a revoked or expired token."""
    state = info.state(now)
    if state == "revoked":
        assert info.revoked_at is not None
        raise Unauthorized(f"token revoked at {iso(info.revoked_at)}")
    if state == "expired":
        assert info.expires_at is not None
        raise Unauthorized(f"token expired at {iso(info.expires_at)}")


def check_same_origin(host: str | None, origin: str | None, ui_header: str | None) -> None:
    """Raise ``Forbidden`` unless a cookie-authenticated change comes from the UI itself."""
    if not ui_header:
        raise Forbidden(
            "cross-site request refused: a request authenticated by the UI's cookie must "
            f"carry the {UI_HEADER} header; API clients send 'Authorization: Bearer <token>'"
        )
    if origin is not None and (host is None or urlsplit(origin).netloc.lower() != host.lower()):
        raise Forbidden(f"cross-site request refused: origin {origin!r} is not this server")
