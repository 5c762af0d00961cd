"""What the runtime's pieces share: store, executor, clock, config and a worker pool."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpudock.config import ServerConfig
from gpudock.executors.base import Executor
from gpudock.metrics.runtime import RuntimeMetrics
from gpudock.queue import UsageHistory
from gpudock.scheduler.snapshot import Snapshot
from gpudock.store.db import Database

log = logging.getLogger("gpudock.runtime")


class Clock(Protocol):
    def __call__(self) -> float: ...


@dataclass
class RuntimeContext:
    """Shared state of one server process. Thread-safe where it matters."""

    db: Database
    executor: Executor
    config: ServerConfig
    node_name: str
    instance_id: str
    log_dir: Path
    gpus_emulated: bool = False
    queue_history: UsageHistory | None = None  # fair-share usage, kept by the controller
    snapshot: Snapshot | None = None  # the controller's latest; /metrics reuses it
    clock: Clock = field(default=time.time)
    metrics: RuntimeMetrics = field(default_factory=RuntimeMetrics)  # counters for /metrics
    wake_scheduler: threading.Event = field(default_factory=threading.Event)
    wake_reconciler: threading.Event = field(default_factory=threading.Event)
    _pool: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(max_workers=8, thread_name_prefix="gpudock-work")
    )
    _inflight: set[tuple[str, int]] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run_once(self, kind: str, job_id: int, fn: Callable[[], None]) -> Future[None] | None:
        """Run ``fn`` in the pool unless work of ``kind`` for ``job_id`` is in flight.

        Returns the future, or None when skipped. Exceptions are logged, never raised.
        """
        key = (kind, job_id)
        with self._lock:
            if key in self._inflight:
                return None
            self._inflight.add(key)

        def wrapper() -> None:
            try:
                fn()
            except Exception:
                log.exception("%s of job %s failed unexpectedly", kind, job_id)
            finally:
                with self._lock:
                    self._inflight.discard(key)

        return self._pool.submit(wrapper)

    def busy(self, job_id: int) -> bool:
        with self._lock:
            return any(j == job_id for _, j in self._inflight)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
