"""API tokens. Tokens are random; only their SHA-256 is stored.

A token is active until it is revoked (``revoked_at``) or its ``expires_at``
passes; ``find`` returns revoked and expired tokens too, so the caller can
say which it was. ``last_used_at`` is written at most once per
``TOUCH_EVERY`` seconds per token (``touch``), not once per request.

``TokenCache`` is one process's short-lived copy of the rows it read, so
most requests check their token without a read: see its contract.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Literal

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from gpudock.store.models import TokenRow

MAX_TOKEN_ID = 2**31 - 1  # tokens.id is a 32-bit INTEGER on PostgreSQL

TOKEN_PREFIX = "gpd_"
TOUCH_EVERY = 60.0  # seconds between two writes of one token's last_used_at
CACHE_TTL = 0.5
"""Seconds a process may answer from a token row it read (``TokenCache``): a token
revoked by another process stops working there within this long."""
CACHE_SIZE = 4096  # tokens one process keeps at most; a full cache starts over

TokenState = Literal["active", "expired", "revoked"]


ENROLL = "*"
"""``tokens.node`` of an enrollment token: it only enrolls Swarm agent tasks."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a request acts as. ``node``: a node token's node (its agent only; ``ENROLL``:
    an enrollment token); None for users' and admins' tokens. ``token_id`` and
    ``expires_at`` name the token it came with (None for principals made in code); they
    never take part in equality."""

    user: str
    is_admin: bool
    node: str | None = None
    token_id: int | None = field(default=None, compare=False)
    expires_at: float | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """A stored token, never its secret."""

    id: int
    name: str | None
    user: str
    is_admin: bool
    created_at: float
    created_by: str | None
    expires_at: float | None
    last_used_at: float | None
    revoked_at: float | None
    node: str | None = None

    def state(self, now: float) -> TokenState:
        """``revoked`` wins over ``expired``; a token expires at ``expires_at`` exactly."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and now >= self.expires_at:
            return "expired"
        return "active"

    @property
    def principal(self) -> Principal:
        return Principal(
            self.user, self.is_admin, self.node, token_id=self.id, expires_at=self.expires_at
        )

    @classmethod
    def of(cls, row: TokenRow) -> TokenInfo:
        return cls(
            id=row.id,
            name=row.name,
            user=row.user,
            is_admin=row.is_admin,
            created_at=row.created_at,
            created_by=row.created_by,
            expires_at=row.expires_at,
            last_used_at=row.last_used_at,
            revoked_at=row.revoked_at,
            node=row.node,
        )


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_token(
    session: Session,
    user: str,
    is_admin: bool,
    now: float,
    *,
    name: str | None = None,
    expires_at: float | None = None,
    created_by: str | None = None,
    node: str | None = None,
) -> tuple[TokenInfo, str]:
    """Store a new token; return it and its secret (the plain text is never stored).

    ``node``: a node token, for that node's agent only (``ENROLL``: enrollment).
    """
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = TokenRow(
        token_hash=hash_token(token),
        user=user,
        is_admin=is_admin,
        created_at=now,
        name=name,
        expires_at=expires_at,
        created_by=created_by,
        node=node,
    )
    session.add(row)
    session.flush()
    return TokenInfo.of(row), token


def create_token(session: Session, user: str, is_admin: bool, now: float) -> str:
    """A new token that never expires; returns the secret."""
    return issue_token(session, user, is_admin, now)[1]


def find(session: Session, token: str) -> TokenInfo | None:
    """The token with this secret, whatever its state; None if never issued."""
    return find_hash(session, hash_token(token))


def find_hash(session: Session, digest: str) -> TokenInfo | None:
    """``find`` by the secret's ``hash_token``: one read of the unique index."""
    row = session.scalar(select(TokenRow).where(TokenRow.token_hash == digest))
    return None if row is None else TokenInfo.of(row)


def lookup(session: Session, token: str, now: float) -> Principal | None:
    """The principal of an active token; None if unknown, revoked or expired."""
    info = find(session, token)
    return None if info is None or info.state(now) != "active" else info.principal


def get_token(session: Session, token_id: int) -> TokenInfo | None:
    """The token, or None; also None for an id no row can have (never a database error)."""
    if not 0 < token_id <= MAX_TOKEN_ID:
        return None
    row = session.get(TokenRow, token_id)
    return None if row is None else TokenInfo.of(row)


def lifetimes(
    session: Session, token_ids: Collection[int]
) -> dict[int, tuple[float | None, float | None]]:
    """``{id: (revoked_at, expires_at)}`` of these tokens, in one read by primary key;
    an id with no row is left out."""
    if not token_ids:
        return {}
    query = select(TokenRow.id, TokenRow.revoked_at, TokenRow.expires_at).where(
        TokenRow.id.in_(sorted(token_ids))
    )
    return {row.id: (row.revoked_at, row.expires_at) for row in session.execute(query)}


def list_tokens(session: Session, user: str | None = None) -> list[TokenInfo]:
    """Tokens (of ``user``, or all), oldest first, revoked and expired included."""
    query = select(TokenRow).order_by(TokenRow.id)
    if user is not None:
        query = query.where(TokenRow.user == user)
    return [TokenInfo.of(row) for row in session.scalars(query)]


def revoke_node_tokens(
    session: Session, node: str, now: float, created_by: str | None = None
) -> list[int]:
    """Revoke every active token of ``node`` (only those ``created_by``, if given); return
    their ids."""
    query = select(TokenRow.id).where(TokenRow.node == node, TokenRow.revoked_at.is_(None))
    if created_by is not None:
        query = query.where(TokenRow.created_by == created_by)
    ids = list(session.scalars(query))
    for token_id in ids:
        revoke(session, token_id, now)
    return ids


def revoke(session: Session, token_id: int, now: float) -> bool:
    """Mark the token revoked at ``now``; False if it was revoked already (or is gone)."""
    result = session.execute(
        update(TokenRow)
        .where(TokenRow.id == token_id, TokenRow.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def touch(session: Session, token_id: int, now: float) -> bool:
    """Set ``last_used_at = now`` unless it was set less than ``TOUCH_EVERY`` ago.

    Conditional, so concurrent requests write it at most once per period.
    """
    result = session.execute(
        update(TokenRow)
        .where(
            TokenRow.id == token_id,
            or_(TokenRow.last_used_at.is_(None), TokenRow.last_used_at <= now - TOUCH_EVERY),
        )
        .values(last_used_at=now)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def due_for_touch(info: TokenInfo, now: float) -> bool:
    """Whether a use at ``now`` should be written (``touch``)."""
    return info.last_used_at is None or now - info.last_used_at >= TOUCH_EVERY


def active_admin_tokens(session: Session, now: float) -> list[int]:
    """Ids of admin tokens neither revoked nor expired at ``now``."""
    query = select(TokenRow.id).where(
        TokenRow.is_admin.is_(True),
        TokenRow.revoked_at.is_(None),
        or_(TokenRow.expires_at.is_(None), TokenRow.expires_at > now),
    )
    return list(session.scalars(query))


def has_admin(session: Session, now: float | None = None) -> bool:
    """Whether an admin token exists; with ``now``, an active one (not revoked, not expired)."""
    if now is not None:
        return bool(active_admin_tokens(session, now))
    return (
        session.scalar(select(TokenRow.id).where(TokenRow.is_admin.is_(True)).limit(1)) is not None
    )


class TokenCache:
    """One process's copies of the token rows it read, by ``hash_token``, each for ``ttl``.

    Contract:

    * ``get`` returns a copy read at most ``ttl`` seconds ago (monotonic time),
      else None: a row changed by another process (a revocation) is seen there
      within ``ttl``. The caller still checks ``TokenInfo.state`` with its own
      clock, so an expiry takes effect at once everywhere;
    * ``forget`` (a revocation in this process) drops the token's copy at once,
      and a read that began before it is never stored after it (``generation``),
      so this process never answers from a copy older than its own revocation;
    * at most ``size`` tokens are kept; a full cache is emptied and refills.

    No I/O and no lock on ``get``; ``put`` and ``forget`` hold one short lock.
    """

    def __init__(
        self,
        ttl: float = CACHE_TTL,
        size: int = CACHE_SIZE,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl, self.size, self._monotonic = ttl, size, monotonic
        self._entries: dict[str, tuple[TokenInfo, float]] = {}
        self._lock = threading.Lock()
        self.generation = 0  # bumped by ``forget``: reads begun before it are not stored

    def get(self, digest: str) -> TokenInfo | None:
        """The copy of the token with this hash, if it was read less than ``ttl`` ago."""
        entry = self._entries.get(digest)
        if entry is None or self._monotonic() - entry[1] >= self.ttl:
            return None
        return entry[0]

    def put(self, digest: str, info: TokenInfo, generation: int, read_at: float) -> None:
        """Keep ``info``, read at ``read_at`` (``now()`` before the read) in ``generation``."""
        with self._lock:
            if generation != self.generation:
                return  # a revocation landed during the read: the copy may predate it
            if len(self._entries) >= self.size:
                self._entries.clear()
            self._entries[digest] = (info, read_at)

    def now(self) -> float:
        """The cache's clock (monotonic): pass its value before a read to ``put``."""
        return self._monotonic()

    def forget(self, token_id: int) -> None:
        """Drop every copy of token ``token_id`` (it was revoked in this process)."""
        with self._lock:
            self.generation += 1
            for digest in [d for d, (info, _) in self._entries.items() if info.id == token_id]:
                del self._entries[digest]
