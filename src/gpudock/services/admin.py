"""Live administration: read, diff and apply the scheduling config (``ClusterConfig``).

An apply is one database transaction (validate against the store, store the
config, set the nodes' labels and taints, record ``config.applied``, bump the
cluster version). Every process, the one that took the apply included, reads
the new config when it next syncs (``RuntimeContext.sync``): the controller's
next cycle, any request that reads the config, and, under the write lock,
any write checked against it (``config_guard``). So once the apply's
response is sent, every API process answers with the new config, and a
refused apply changes nothing. Applies are serialised by the write lock.
Lowering a quota stops no job: the cycle's usual rules (reclaim, priority)
decide what runs next.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from gpudock.cluster_config import Change, ClusterConfig, NodeTraitsConfig, diff
from gpudock.config import ServerConfig
from gpudock.core.errors import Forbidden, InvalidInput
from gpudock.queue.config import GROUP_PREFIX, QueuesConfig
from gpudock.queue.resources import GiB, Resource
from gpudock.runtime.context import RuntimeContext
from gpudock.store import cluster_config as store
from gpudock.store.tokens import Principal

log = logging.getLogger("gpudock.admin")


class ConfigRefused(InvalidInput):
    """A config refused whole: ``errors`` lists ``(path, message)``, every one found."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        super().__init__(
            "; ".join(f"{path}: {message}" for path, message in errors),
            ",".join(path for path, _ in errors),
        )
        self.errors = errors


@dataclass(frozen=True, slots=True)
class InForce:
    """The config in force and where it came from (version 0: the config file's)."""

    config: ClusterConfig
    version: int
    applied_at: float | None
    applied_by: str | None
    source: str


class AdminService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def current(self, principal: Principal) -> InForce:
        """The scheduling config in force, with the nodes' labels and taints as stored."""
        _admin_only(principal)
        return self.in_force()

    def in_force(self) -> InForce:
        """``current`` without the role check (SIGHUP)."""
        with self.ctx.db.read() as session:
            self.ctx.sync(session)
            return self._in_force(session)

    def diff(self, principal: Principal, new: ClusterConfig) -> list[Change]:
        """What applying ``new`` would change; ``ConfigRefused`` if it would be refused."""
        _admin_only(principal)
        with self.ctx.db.read() as session:
            self.ctx.sync(session)
            old = self._in_force(session).config
            _refuse_if_bad(session, old, new)
        return diff(old, new)

    def apply(self, principal: Principal, new: ClusterConfig) -> tuple[int, list[Change]]:
        """Put ``new`` in force; the new version and the changes. ``ConfigRefused``: nothing
        changed."""
        _admin_only(principal)
        return self.apply_as(new, principal.user, "api")

    def apply_as(self, new: ClusterConfig, by: str, source: str) -> tuple[int, list[Change]]:
        """``apply`` for ``by`` (a user, or ``sighup``) without the role check."""
        with self.ctx.db.write() as session:
            self.ctx.sync(session)  # the config in force now, whoever applied it
            old = self._in_force(session).config
            _refuse_if_bad(session, old, new)
            changes = diff(old, new)
            nodes = {name: (t.labels, t.taints) for name, t in new.nodes.items()}
            document, now = new.document(), self.ctx.clock()
            dicts = [c.to_dict() for c in changes]
            version = store.save(session, document, nodes, by, source, now, dicts)
        with self.ctx.db.read() as session:
            self.ctx.sync(session)  # in force here at once; elsewhere at each process's next sync
        self.ctx.wake_scheduler.set()
        log.info(
            "config version %d applied by %s (%s): %d changes", version, by, source, len(dicts)
        )
        return version, changes

    def _in_force(self, session: Session) -> InForce:
        config = self.ctx.config
        nodes = {
            name: NodeTraitsConfig(labels=labels, taints=taints)
            for name, (labels, taints) in store.node_traits(session).items()
            if labels or taints
        }
        live = ClusterConfig(
            priority_classes=config.scheduler.priority_classes,
            queues=config.scheduler.queues,
            queueing=config.scheduler.queueing,
            nodes=nodes,
        )
        applied = store.latest(session)
        if applied is None:
            return InForce(live, 0, None, None, "file")
        return InForce(
            live, applied.version, applied.applied_at, applied.applied_by, applied.source
        )


def _admin_only(principal: Principal) -> None:
    if not principal.is_admin:
        raise Forbidden("only an admin can read or change the cluster config")


def _refuse_if_bad(session: Session, old: ClusterConfig, new: ClusterConfig) -> None:
    """Every rule that needs the store; ``ConfigRefused`` naming each error found."""
    errors = [
        *unknown_users(new.queues, store.known_users(session)),
        *unknown_nodes(new, set(store.node_traits(session))),
        *guarantees_above_capacity(new.queues, *store.gpu_capacity(session)),
        *_classes_in_use(session, old, new),
    ]
    if errors:
        raise ConfigRefused(errors)


def unknown_users(queues: QueuesConfig, known: set[str]) -> list[tuple[str, str]]:
    errors = []
    for index, queue in enumerate(queues.queues):
        for position, member in enumerate(queue.members or []):
            if not member.startswith(GROUP_PREFIX) and member not in known:
                errors.append(
                    (f"queues.queues[{index}].members[{position}]", f"unknown user {member!r}")
                )
    for group, users in queues.groups.items():
        for position, user in enumerate(users):
            if user not in known:
                errors.append((f"queues.groups.{group}[{position}]", f"unknown user {user!r}"))
    return errors


def unknown_nodes(new: ClusterConfig, registered: set[str]) -> list[tuple[str, str]]:
    names = ", ".join(sorted(registered)) or "none"
    return [
        (f"nodes.{name}", f"unknown node {name!r} (registered: {names})")
        for name in new.nodes
        if name not in registered
    ]


def guarantees_above_capacity(
    queues: QueuesConfig, gpus: int, memory: int
) -> list[tuple[str, str]]:
    """A cohort (or a queue alone) whose guarantees sum above the registered GPUs."""
    groups: dict[str, list[int]] = {}
    for index, queue in enumerate(queues.queues):
        groups.setdefault(queue.cohort or f"\0{queue.name}", []).append(index)
    errors = []
    for group, members in groups.items():
        sizes: tuple[tuple[Resource, int, int], ...] = (
            ("gpus", gpus, 1),
            ("gpu_memory", memory, GiB),
        )
        for resource, capacity, unit in sizes:
            total = sum(_guaranteed(queues, i, resource) for i in members)
            if total <= capacity:
                continue
            if group.startswith("\0"):
                path, who = f"queues.queues[{members[0]}].guarantee.{resource}", "the queue"
            else:
                path = f"queues.cohorts[{queues.cohorts.index(group)}]"
                who = f"cohort {group!r}"
            errors.append(
                (
                    path,
                    f"{who} guarantees {total / unit:g} {resource} in total but the cluster "
                    f"has {capacity / unit:g}",
                )
            )
    return errors


def _guaranteed(queues: QueuesConfig, index: int, resource: Resource) -> float:
    return float(queues.queues[index].guarantee.get(resource) or 0)


def _classes_in_use(session: Session, old: ClusterConfig, new: ClusterConfig) -> list[Any]:
    kept = {c.name for c in new.priority_classes}
    removed = [c.name for c in old.priority_classes if c.name not in kept]
    used = store.jobs_using_classes(session, removed)
    return [
        (
            "priority_classes",
            f"priority class {name!r} is removed but unfinished jobs use it: "
            + ", ".join(str(j) for j in jobs),
        )
        for name, jobs in sorted(used.items())
    ]


def start_config(session: Session, config: ServerConfig, node: str) -> ServerConfig:
    """The config a starting server runs: the file's, with the stored scheduling config
    (the last apply) in force when there is one. A difference is logged."""
    applied = store.latest(session)
    if applied is None:
        return config
    try:
        stored = ClusterConfig.model_validate(applied.document)
    except ValueError as exc:
        log.error(
            "stored config version %d is not valid (%s); using the file", applied.version, exc
        )
        return config
    file_part = ClusterConfig.of_server(config, node)
    mine = stored.nodes.get(node, NodeTraitsConfig())
    if file_part.model_copy(update={"nodes": {}}) != stored.model_copy(update={"nodes": {}}) or (
        file_part.nodes.get(node, NodeTraitsConfig()) != mine
    ):
        log.warning(
            "the scheduling config in force is version %d (applied by %s), not the config "
            "file's; send SIGHUP to apply the file's",
            applied.version,
            applied.applied_by,
        )
    return stored.into(config, node)
