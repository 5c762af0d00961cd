"""API tokens. Tokens are random; only their SHA-256 is stored."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.store.models import TokenRow

TOKEN_PREFIX = "gpd_"


@dataclass(frozen=True, slots=True)
class Principal:
    user: str
    is_admin: bool


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, user: str, is_admin: bool, now: float) -> str:
    """Create and return a new token; the plain text is never stored."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    session.add(
        TokenRow(token_hash=hash_token(token), user=user, is_admin=is_admin, created_at=now)
    )
    session.flush()
    return token


def lookup(session: Session, token: str) -> Principal | None:
    row = session.scalar(
        select(TokenRow).where(
            TokenRow.token_hash == hash_token(token), TokenRow.revoked_at.is_(None)
        )
    )
    return None if row is None else Principal(user=row.user, is_admin=row.is_admin)


def has_admin(session: Session) -> bool:
    return (
        session.scalar(select(TokenRow.id).where(TokenRow.is_admin.is_(True)).limit(1)) is not None
    )
