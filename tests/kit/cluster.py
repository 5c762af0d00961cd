"""Fill a store directly with an emulated cluster and jobs in every state.

For the ``/metrics`` tests and ``benchmarks/metrics_scrape.py``: jobs are
inserted and moved through the store's own gates (``insert_job``,
``apply_plan``, ``transition``, ``set_pending_reasons``), so the rows are
exactly what a running server would hold, without a scheduler or Docker.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpudock.core.job import JobSpec, JobState, PendingReason
from gpudock.gpus import emulated_inventory
from gpudock.scheduler.snapshot import Placement, Plan
from gpudock.store import inventory as inv_store
from gpudock.store import jobs as job_store
from gpudock.store.applier import apply_plan
from gpudock.store.db import Database

GIB = 1024**3
REASON_LAYERS = ("devices", "quota", "priority", "constraints")


@dataclass(frozen=True)
class Filled:
    """What ``fill`` made: counts by state, and the GPUs jobs hold."""

    running: int
    pending: int
    finished: int
    exclusive_gpus: int
    shared_gpus: int


def fill(
    db: Database,
    nodes: int,
    gpus_per_node: int = 8,
    jobs: int = 100,
    queues: tuple[str, ...] = ("vision", "nlp"),
    now: float = 1_000_000.0,
) -> Filled:
    """``nodes`` nodes of ``gpus_per_node`` emulated H100s, then ``jobs`` jobs.

    On each node all but the last two GPUs run one exclusive job each, and the
    last two GPUs each hold two 10 GiB shares; of the jobs left over, half
    wait (with a pending reason whose layer cycles through
    ``REASON_LAYERS``) and half are finished. Queues alternate.
    """
    with db.write() as session:
        for n in range(nodes):
            inventory = emulated_inventory(f"node-{n:03d}", f"{gpus_per_node}xH100-80GB")
            inv_store.register_node(session, inventory, now)
    plan, specs = Plan(), []
    exclusive = shared = 0
    for n in range(nodes):
        inventory = emulated_inventory(f"node-{n:03d}", f"{gpus_per_node}xH100-80GB")
        for gpu in inventory.gpus:
            kept_for_shares = gpu.index >= gpus_per_node - 2
            for _share in range(2 if kept_for_shares else 1):
                if len(specs) >= jobs:
                    break
                memory = 10 * GIB if kept_for_shares else None
                specs.append(_spec(len(specs), queues, memory))
                plan.placements.append(Placement(0, inventory.name, (gpu.uuid,), memory))
            shared, exclusive = shared + kept_for_shares, exclusive + (not kept_for_shares)
    placed = len(specs)
    specs += [_spec(i, queues, None) for i in range(placed, jobs)]
    ids = _insert(db, specs, now)
    plan.placements = [
        Placement(ids[i], p.node, p.gpu_uuids, p.memory_per_gpu)
        for i, p in enumerate(plan.placements)
    ]
    apply_plan(db, plan, now)
    _start(db, ids[:placed], now)
    waiting = ids[placed:][: (jobs - placed + 1) // 2]
    done = ids[placed + len(waiting) :]
    _wait_and_finish(db, waiting, done, now)
    return Filled(placed, len(waiting), len(done), exclusive, shared)


def _spec(i: int, queues: tuple[str, ...], memory: int | None) -> JobSpec:
    return JobSpec(
        image="gpudock-test/busybox:latest",
        command=["sleep", "3600"],
        gpus=1,
        gpu_memory=memory,
        queue=queues[i % len(queues)],
    )


def _insert(db: Database, specs: list[JobSpec], now: float) -> list[int]:
    with db.write() as session:
        return [
            job_store.insert_job(session, s, f"user{i % 7}", now).id for i, s in enumerate(specs)
        ]


def _start(db: Database, ids: list[int], now: float) -> None:
    with db.write() as session:
        for job_id in ids:
            job_store.transition(session, job_id, JobState.ALLOCATED, JobState.STARTING, now)
            job_store.transition(
                session, job_id, JobState.STARTING, JobState.RUNNING, now, started_at=now
            )


def _wait_and_finish(db: Database, waiting: list[int], done: list[int], now: float) -> None:
    with db.write() as session:
        reasons = {
            job_id: [PendingReason(REASON_LAYERS[i % len(REASON_LAYERS)], "waits")]
            for i, job_id in enumerate(waiting)
        }
        job_store.set_pending_reasons(session, reasons)
        for job_id in done:
            job_store.transition(
                session, job_id, JobState.PENDING, JobState.CANCELLED, now, reason="test"
            )
