"""Jobs whose container the engine does not describe: held, with a reason, until it does.

An engine can hang on one container and answer every other call: dockerd
deadlocked in its own ``libnetwork-setkey`` hook kept that container's lock,
and ``docker inspect`` of it hung while ``docker ps`` answered. Such a call
ends in ``EngineTimeout`` (every engine call has a deadline:
``executors/deadlines.py``). The job whose container it is then stays as it
is: its state, its GPUs, no second start, no finish. It shows one reason
(layer ``engine``: ``engine did not describe container X for 2m00s``), and
the rest of the node goes on. When the engine describes the container again,
the reason is cleared and the job is settled as any other (``settle``).

When a call about the whole engine (a ping) fails too, the node is marked
unavailable instead (``node_health``), as for any outage.

The time since the engine last described a container is this process's
memory; after a restart it counts again from the first failed call.
"""

from __future__ import annotations

import logging

from gpudock.core.job import Job, PendingReason
from gpudock.core.units import format_duration
from gpudock.executors.base import EngineTimeout, ExecutorUnavailable
from gpudock.runtime import node_health
from gpudock.runtime.context import RuntimeContext
from gpudock.store import jobs as job_store

log = logging.getLogger("gpudock.runtime")

LAYER = "engine"
COUNTERFACTUAL = (
    "settled as soon as the engine describes it again; until then the job keeps its "
    "GPUs and is not started again"
)


def hold(ctx: RuntimeContext, job: Job, name: str, why: str) -> None:
    """The engine did not describe ``name``, ``job``'s container: record its reason.

    ``why`` (the engine call's error) goes to the log once per hold. The
    reason's time counts from the first call that timed out, which waited
    ``deadlines.describe`` at least.
    """
    now = ctx.clock()
    since, first = ctx.undescribed.note(job.id, name, now - ctx.executor.deadlines.describe)
    reason = PendingReason(
        LAYER,
        f"engine did not describe container {name} for {format_duration(now - since)}",
        COUNTERFACTUAL,
    )
    with ctx.db.write() as session:
        job_store.set_active_reason(session, job.id, job.attempt, reason)
    if first:
        log.warning(
            "job %s: the engine did not describe container %s (%s); the job keeps its GPUs "
            "and waits for the engine, and the node goes on",
            job.id,
            name,
            why,
        )


def settle(ctx: RuntimeContext, job: Job) -> None:
    """The engine described ``job``'s container again: clear the reason of a held job."""
    held = ctx.undescribed.clear(job.id)
    if held is None:
        return
    name, since = held
    with ctx.db.write() as session:
        job_store.set_active_reason(session, job.id, job.attempt, None)
    log.warning(
        "job %s: the engine describes container %s again, after %s",
        job.id,
        name,
        format_duration(ctx.clock() - since),
    )


def engine_late(ctx: RuntimeContext, job: Job, exc: EngineTimeout) -> None:
    """A call about ``job``'s container missed its deadline: hold the job if the engine
    still answers a ping, else mark the node unavailable (an outage)."""
    try:
        ctx.executor.ping()
    except ExecutorUnavailable as down:
        node_health.mark_engine_down(ctx, down)
        return
    hold(ctx, job, exc.target or job.container_name or "?", str(exc))
