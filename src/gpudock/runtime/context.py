"""What the runtime's pieces share: store, executor, clock, config and worker lanes.

One ``RuntimeContext`` per process: the controller's (the loops and their
lanes) and each API worker's (the app). What a process caches from the store
follows the store's cluster version (``store/meta.py``): ``sync`` reads it
(one indexed read) and, when it moved, re-reads the scheduling config in
force and drops the nodes cached for submits' feasibility checks. A request
that reads the scheduling config syncs first, in its own read session, and
a write checked against it syncs again under the write lock
(``services/config_guard.py``), so an apply committed in any process is in
force in this one before that apply's response returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sqlalchemy.orm import Session

from gpudock.cluster_config import ClusterConfig
from gpudock.config import ServerConfig
from gpudock.executors.base import Executor
from gpudock.gpus.mps import MpsSetup
from gpudock.gpus.telemetry import GpuTelemetry
from gpudock.logfmt import bind_job
from gpudock.metrics.runtime import RuntimeMetrics
from gpudock.runtime.lanes import Lane
from gpudock.runtime.wakeup import Wakeup
from gpudock.scheduler.snapshot import NodeView, Snapshot
from gpudock.store import cluster_config as config_store
from gpudock.store import meta as meta_store
from gpudock.store.db import Database, database_unavailable
from gpudock.store.snapshot import load_nodes
from gpudock.store.tokens import TokenCache
from gpudock.vault import Vault

log = logging.getLogger("gpudock.runtime")


LANE_WORKERS = {"launch": 8, "control": 4, "archive": 2}
"""Worker threads per lane: the runtime's side effects never wait behind another lane's."""
LANE_SPARE = {"launch": 4, "control": 2}
"""More threads per lane that only work for jobs holding GPUs take (``lanes.Lane``)."""

LANE_OF = {
    "launch": "launch",
    "finish": "control",
    "stop": "control",
    "orphan": "control",
    "archive": "archive",
}
"""The lane of each kind of work (``run_once``). Freeing GPUs (finish, stop) has its own."""


def _lanes() -> dict[str, Lane]:
    return {lane: Lane(lane, n, LANE_SPARE.get(lane, 0)) for lane, n in LANE_WORKERS.items()}


class Undescribed:
    """The jobs held because the engine does not describe their container
    (``runtime/undescribed.py``): since when, by the runtime's clock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[int, tuple[str, float]] = {}

    def note(self, job_id: int, name: str, since: float) -> tuple[float, bool]:
        """Record ``name`` undescribed from ``since`` unless it already is; return
        since when it is, and whether this is the first note."""
        with self._lock:
            held = self._since.get(job_id)
            if held is not None and held[0] == name:
                return held[1], False
            self._since[job_id] = (name, since)
            return since, True

    def clear(self, job_id: int) -> tuple[str, float] | None:
        """Forget ``job_id``; return its container and since when, if it was held."""
        with self._lock:
            return self._since.pop(job_id, None)

    def held(self) -> set[int]:
        """The ids of the jobs held now."""
        with self._lock:
            return set(self._since)

    def keep_only(self, job_ids: Iterable[int]) -> None:
        """Forget the jobs not in ``job_ids`` (they ended or moved on)."""
        keep = set(job_ids)
        with self._lock:
            for job_id in [j for j in self._since if j not in keep]:
                del self._since[job_id]


class Clock(Protocol):
    def __call__(self) -> float: ...


@dataclass
class RuntimeContext:
    """Shared state of one server process. Thread-safe where it matters."""

    db: Database
    executor: Executor
    config: ServerConfig  # in force here: ``base_config`` with the applied config on top
    node_name: str
    instance_id: str
    log_dir: Path
    gpus_emulated: bool = False
    vault: Vault | None = None  # encrypts users' registry logins; None: none can be stored
    cluster: bool = False  # the executor runs many nodes (Swarm): runtime/cluster.py watches them
    # GPU readings node agents reported last ({node: {uuid: reading}}); /metrics shows them
    node_telemetry: dict[str, dict[str, GpuTelemetry]] = field(default_factory=dict)
    mps: MpsSetup | None = None  # the node's MPS daemon while it shares GPUs by MPS
    gpu_watchdog: bool = False  # the node's GPU-memory watchdog runs (NVML is there)
    # an application fault on one of these GPUs since then, for a failure reason (gpu_guard)
    fault_note: Callable[[Sequence[str], float | None], str | None] | None = None
    clock: Clock = field(default=time.time)
    metrics: RuntimeMetrics = field(default_factory=RuntimeMetrics)  # counters for /metrics
    tokens: TokenCache = field(default_factory=TokenCache)  # this process's token rows
    process: str = "server"  # who answers: "server" (one process), "api-N", "controller"
    snapshot: Snapshot | None = None  # the controller's latest (its process only): /metrics
    control_address: str | None = None  # an API worker's controller (``control.py``)
    wake_scheduler: Wakeup = field(default_factory=Wakeup)
    wake_reconciler: Wakeup = field(default_factory=Wakeup)
    undescribed: Undescribed = field(default_factory=Undescribed)  # jobs held for the engine
    base_config: ServerConfig | None = None  # the file's; None: ``config`` as first given
    cluster_version: int = -1  # the stored version ``config`` agrees with; -1: not synced
    _nodes: tuple[int, tuple[NodeView, ...]] | None = None  # (cluster version, nodes)
    _sync_lock: threading.Lock = field(default_factory=threading.Lock)
    _pools: dict[str, Lane] = field(default_factory=_lanes)
    _inflight: set[tuple[str, int]] = field(default_factory=set)
    _after: dict[int, dict[str, Callable[[], None]]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.base_config is None:
            self.base_config = self.config

    def sync(self, session: Session) -> int:
        """Bring what this process caches up to the stored cluster version; return it.

        One read when nothing changed. When the version moved: ``config``
        becomes a new value (the base config with the applied config in force
        on top), so a holder of the old one can tell by identity
        (``write_checked``), and the cached nodes are dropped. Never goes back
        to an older version (a session may read an older snapshot than another
        thread's).
        """
        stored = meta_store.cluster_version(session)
        if stored <= self.cluster_version:
            return stored
        applied = config_store.latest(session)
        with self._sync_lock:
            if stored > self.cluster_version:
                self.config = self._in_force(applied)
                self.cluster_version = stored
                self._nodes = None
        return stored

    def _in_force(self, applied: config_store.Applied | None) -> ServerConfig:
        base = self.base_config or self.config
        if applied is None:
            return base.model_copy()
        try:
            return ClusterConfig.model_validate(applied.document).into(base, self.node_name)
        except ValueError as exc:
            log.error("stored config version %d is not valid (%s)", applied.version, exc)
            return base.model_copy()

    def published_snapshot(self) -> Snapshot | None:
        """The controller's latest snapshot while it keeps publishing, else None.

        Only the controller's process has one. A snapshot older (by ``clock``)
        than ``max(10 s, 3 x schedule_interval)`` means the loop stopped
        publishing (one stuck on an outage): readers then go to the store.
        """
        snapshot = self.snapshot
        if snapshot is None:
            return None
        if self.clock() - snapshot.now > max(10.0, 3 * self.config.schedule_interval):
            return None
        return snapshot

    def feasibility_nodes(self) -> tuple[NodeView, ...]:
        """Every node as submits check a job against it (``never_fits``), from a cache
        that holds while the cluster version does (then read again, with one sync)."""
        cached = self._nodes
        if cached is not None and cached[0] == self.cluster_version:
            return cached[1]
        with self.db.read() as session:
            version = self.sync(session)
            nodes = load_nodes(session)
        if version == self.cluster_version:
            self._nodes = (version, nodes)
        return nodes

    def run_once(
        self, kind: str, job_id: int, fn: Callable[[], None], *, gpus: bool = False
    ) -> Future[None] | None:
        """Run ``fn`` in its lane unless work of ``kind`` for ``job_id`` is in flight.

        The lane is ``LANE_OF[kind]`` (``launch`` for unknown kinds): finishes
        and stops never queue behind launches, and log archiving never holds
        either. ``gpus``: the job holds GPUs, so ``fn`` goes ahead of the
        lane's queued work for jobs that hold none, and may use the lane's
        ``LANE_SPARE`` threads (``lanes.Lane``): a GPU job's launch never waits
        behind a backlog of CPU-only launches.
        Returns the future, or None when skipped. Exceptions are logged,
        never raised.
        """
        key = (kind, job_id)
        with self._lock:
            if key in self._inflight:
                return None
            self._inflight.add(key)

        def wrapper() -> None:
            try:
                self._run_logged(kind, job_id, fn)
            finally:
                with self._lock:
                    self._inflight.discard(key)
                    follow = {} if self._has_work(job_id) else self._after.pop(job_id, {})
                for step in follow.values():
                    self._run_logged("follow-up", job_id, step)

        return self._pools[LANE_OF.get(kind, "launch")].submit(wrapper, first=gpus)

    def after_work(self, job_id: int, key: str, fn: Callable[[], None]) -> bool:
        """Run ``fn`` once the work in flight for ``job_id`` ends; False if none is in flight.

        When True, ``fn`` runs in the lane thread of the last work to end, right
        after it; a second ``fn`` under a ``key`` already waiting is dropped
        (the waiting one runs later and sees as much). When False, nothing is
        kept and the caller acts now. The check and the hand-over hold one
        lock, so ``fn`` is never lost to a race with the work's end.
        """
        with self._lock:
            if not self._has_work(job_id):
                return False
            self._after.setdefault(job_id, {}).setdefault(key, fn)
            return True

    def _run_logged(self, kind: str, job_id: int, fn: Callable[[], None]) -> None:
        """Run ``fn``; an error is logged with its trace, except a database outage:
        that is logged once for the whole server (``Database.availability``), and the
        reconciler resumes the work when the database answers."""
        try:
            with bind_job(job_id):  # its log records carry the job
                fn()
        except Exception as exc:
            if database_unavailable(exc):
                self.db.availability.failed(exc)
                log.debug("%s of job %s deferred: the database is down", kind, job_id,
                          extra={"job": job_id})  # fmt: skip
                return
            log.exception("%s of job %s failed unexpectedly", kind, job_id, extra={"job": job_id})

    def busy(self, job_id: int) -> bool:
        with self._lock:
            return self._has_work(job_id)

    def _has_work(self, job_id: int) -> bool:
        """Work of any kind in flight for ``job_id``; the caller holds ``_lock``."""
        return any(j == job_id for _, j in self._inflight)

    def in_flight(self, kind: str, job_id: int) -> bool:
        """True while work of ``kind`` for ``job_id`` runs or waits in its lane."""
        with self._lock:
            return (kind, job_id) in self._inflight

    def shutdown(self) -> None:
        """Cancel the lanes' queued work and wait for the running work to end."""
        for pool in self._pools.values():
            pool.shutdown()
