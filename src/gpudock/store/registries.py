"""Users' own registry logins: one row per (user, registry), the password encrypted.

This module stores and finds rows; it never sees a plain password (the
service encrypts before ``put`` and decrypts after ``find``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpudock.store.models import RegistryCredentialRow


@dataclass(frozen=True, slots=True)
class StoredLogin:
    """A stored login; ``secret`` is ciphertext, kept out of the repr all the same."""

    user: str
    registry: str
    username: str
    created_at: float
    secret: str

    def __repr__(self) -> str:
        return (
            f"StoredLogin(user={self.user!r}, registry={self.registry!r}, "
            f"username={self.username!r}, created_at={self.created_at!r})"
        )

    @classmethod
    def of(cls, row: RegistryCredentialRow) -> StoredLogin:
        return cls(row.user, row.host, row.username, row.created_at, row.secret)


def put(
    session: Session, user: str, registry: str, username: str, secret: str, now: float
) -> StoredLogin:
    """Store ``user``'s login to ``registry``, replacing an earlier one."""
    row = session.scalar(
        select(RegistryCredentialRow).where(
            RegistryCredentialRow.user == user, RegistryCredentialRow.host == registry
        )
    )
    if row is None:
        row = RegistryCredentialRow(user=user, host=registry)
        session.add(row)
    row.username, row.secret, row.created_at = username, secret, now
    session.flush()
    return StoredLogin.of(row)


def find(session: Session, user: str, registry: str) -> StoredLogin | None:
    row = session.scalar(
        select(RegistryCredentialRow).where(
            RegistryCredentialRow.user == user, RegistryCredentialRow.host == registry
        )
    )
    return None if row is None else StoredLogin.of(row)


def list_for(session: Session, user: str) -> list[StoredLogin]:
    """``user``'s logins, by registry."""
    rows = session.scalars(
        select(RegistryCredentialRow)
        .where(RegistryCredentialRow.user == user)
        .order_by(RegistryCredentialRow.host)
    )
    return [StoredLogin.of(row) for row in rows]


def remove(session: Session, user: str, registry: str) -> bool:
    """Delete ``user``'s login to ``registry``; False if there was none."""
    result = session.execute(
        delete(RegistryCredentialRow).where(
            RegistryCredentialRow.user == user, RegistryCredentialRow.host == registry
        )
    )
    return bool(getattr(result, "rowcount", 0))


def anyone_logged_in(session: Session, registry: str) -> bool:
    """Whether any user stored a login to ``registry`` (it is then treated as private)."""
    found = session.scalar(
        select(RegistryCredentialRow.id).where(RegistryCredentialRow.host == registry).limit(1)
    )
    return found is not None
