"""Queue use cases: usage against quota and fair share, for ``GET /v1/queues``."""

from __future__ import annotations

from typing import Any

from gpudock.queue import QueueLoad, QueuesConfig, Resources, UsageHistory, build_report
from gpudock.queue.report import QueuesReport
from gpudock.runtime.context import RuntimeContext
from gpudock.scheduler.admission import QueueAdmission, QueuePolicy, queue_usage, usable_capacity
from gpudock.scheduler.snapshot import Snapshot
from gpudock.services.queue_access import add_standing
from gpudock.store import published
from gpudock.store.snapshot import load_snapshot
from gpudock.store.tokens import Principal
from gpudock.store.user_jobs import pending_by_queue


class QueueService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def report(self, principal: Principal) -> dict[str, Any]:
        """Every declared queue (and any other queue with jobs): usage, guarantee,
        limit, borrowed, lendable, fair-share entitlement and dominant share;
        the caller's standing in each, and membership for admins (``add_standing``)."""
        with self.ctx.db.read() as session:
            self.ctx.sync(session)
            config = self.ctx.config.scheduler.queues
            snapshot = load_snapshot(session, self.ctx.clock())
            pending = pending_by_queue(session, principal.user)
            history = published.history_at(session, snapshot, config.fair_share.half_life)
        report = queue_report(snapshot, config, history).to_dict()
        return add_standing(report, config, principal, pending)


def queue_report(
    snapshot: Snapshot, config: QueuesConfig, history: UsageHistory | None
) -> QueuesReport:
    """The queue report for ``snapshot`` (pure; ``/v1/queues`` and ``/metrics`` share it)."""
    policy = QueuePolicy.build(config, history)
    usage = queue_usage(snapshot)
    admission = QueueAdmission(policy, snapshot, usage)
    running: dict[str, int] = {}
    for job in snapshot.running:
        running[job.queue] = running.get(job.queue, 0) + 1
    pending: dict[str, list[Resources]] = {}
    for request in snapshot.pending:
        pending.setdefault(request.queue, []).append(admission.estimate(request))
    loads = {
        name: QueueLoad(
            usage=usage.get(name, Resources()),
            running_jobs=running.get(name, 0),
            pending_jobs=len(pending.get(name, [])),
            pending_demand=sum(pending.get(name, []), Resources()),
        )
        for name in set(usage) | set(running) | set(pending)
    }
    report = build_report(
        policy.queues, config.fair_share, usable_capacity(snapshot), loads, policy.history
    )
    return report
