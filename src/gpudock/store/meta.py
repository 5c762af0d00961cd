"""Small facts kept in the ``meta`` table: JSON values (e.g. fair-share usage history) and
the cluster version.

The cluster version is a counter that every change to what a process caches
from the store bumps, in the changing transaction: an applied scheduling
config (``cluster_config.save``) and a node's registration, which sets what
``scheduler.feasibility.never_fits`` reads (GPUs, CPUs, memory, labels,
taints). A process compares it with the version its caches were read at
(``RuntimeContext.sync``), so one indexed read tells it whether they are
still true.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select
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


CLUSTER_VERSION = "cluster_version"
_READ_VERSION = select(MetaRow.value).where(MetaRow.key == CLUSTER_VERSION)  # built once


def cluster_version(session: Session) -> int:
    """The cluster version (0 until the first bump): one read of the primary key."""
    value = session.scalar(_READ_VERSION)
    return 0 if value is None else int(value)


def bump_cluster_version(session: Session) -> int:
    """Add one to the cluster version in the caller's (write) transaction; the new value."""
    row = session.get(MetaRow, CLUSTER_VERSION)
    if row is None:
        row = MetaRow(key=CLUSTER_VERSION, value="0")
        session.add(row)
    row.value = str(int(row.value) + 1)
    session.flush()
    return int(row.value)
