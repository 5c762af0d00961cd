"""The applied scheduling config: stored rows, node traits, and what validation reads.

Every function takes the caller's session: ``save`` writes the config row,
the nodes' labels and taints and the ``config.applied`` event in the
caller's transaction, so an apply is committed whole or not at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpudock.core.events import EventType
from gpudock.core.job import TERMINAL_STATES, JobState
from gpudock.store import events as event_store
from gpudock.store import meta as meta_store
from gpudock.store.models import ClusterConfigRow, GpuRow, JobRow, NodeRow, TokenRow


@dataclass(frozen=True, slots=True)
class Applied:
    """The stored config in force: its id (the version), when, by whom, how, and the document."""

    version: int
    applied_at: float
    applied_by: str
    source: str
    document: dict[str, Any]


def latest(session: Session) -> Applied | None:
    """The newest applied config, or None when none was ever applied."""
    row = session.scalars(
        select(ClusterConfigRow).order_by(ClusterConfigRow.id.desc()).limit(1)
    ).first()
    if row is None:
        return None
    return Applied(row.id, row.applied_at, row.applied_by, row.source, dict(row.document))


def save(
    session: Session,
    document: dict[str, Any],
    nodes: dict[str, tuple[dict[str, str], list[str]]],
    by: str,
    source: str,
    now: float,
    changes: list[dict[str, Any]],
) -> int:
    """Store ``document`` as the config in force, set every node's labels and taints
    (``nodes``; a registered node not in it gets none), record ``config.applied`` and
    bump the cluster version (``meta.py``).

    Returns the new version. All in the caller's transaction.
    """
    row = ClusterConfigRow(applied_at=now, applied_by=by, source=source, document=document)
    session.add(row)
    for node in session.scalars(select(NodeRow)):
        labels, taints = nodes.get(node.name, ({}, []))
        if node.labels != labels or list(node.taints or []) != taints:
            node.labels, node.taints = labels, taints
    session.flush()
    payload = {"version": row.id, "by": by, "source": source, "changes": changes}
    event_store.append(session, EventType.CONFIG_APPLIED, now, payload)
    meta_store.bump_cluster_version(session)  # every process re-reads its config (``meta.py``)
    return row.id


def node_traits(session: Session) -> dict[str, tuple[dict[str, str], list[str]]]:
    """Every registered node's labels and taints, by name."""
    return {
        row.name: (dict(row.labels or {}), list(row.taints or []))
        for row in session.scalars(select(NodeRow).order_by(NodeRow.name))
    }


def known_users(session: Session) -> set[str]:
    """Users gpudock knows: those that hold (or held) a token, or submitted a job."""
    users = set(session.scalars(select(TokenRow.user).distinct()))
    users.update(session.scalars(select(JobRow.user).distinct()))
    return users


def gpu_capacity(session: Session) -> tuple[int, int]:
    """GPUs registered on every node, and their memory in bytes (whatever their health)."""
    count, memory = session.execute(select(func.count(), func.sum(GpuRow.memory_total))).one()
    return int(count or 0), int(memory or 0)


def jobs_using_classes(session: Session, classes: Iterable[str]) -> dict[str, list[int]]:
    """Unfinished jobs naming each of ``classes`` as their priority class, by class."""
    wanted = set(classes)
    found: dict[str, list[int]] = {}
    if not wanted:
        return found
    live = [s.value for s in JobState if s not in TERMINAL_STATES]
    rows = session.execute(
        select(JobRow.id, JobRow.spec).where(JobRow.state.in_(live)).order_by(JobRow.id)
    )
    for job_id, spec in rows:
        klass = (spec or {}).get("priority_class")
        if klass in wanted:
            found.setdefault(klass, []).append(job_id)
    return found
