"""Small JSON facts kept in the ``meta`` table (e.g. fair-share usage history)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy.orm import Session

from gpudock.store.models import MetaRow


def get_json(session: Session, key: str) -> Any:
    """The value stored under ``key``, or None."""
    row = session.get(MetaRow, key)
    return None if row is None else json.loads(row.value)


def put_json(session: Session, key: str, value: Any) -> None:
    """Store ``value`` (JSON-serialisable) under ``key``, replacing any old value."""
    row = session.get(MetaRow, key)
    text = json.dumps(value, sort_keys=True)
    if row is None:
        session.add(MetaRow(key=key, value=text))
    else:
        row.value = text
