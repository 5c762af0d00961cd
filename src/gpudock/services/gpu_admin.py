"""GPU use cases for admins: cordon and uncordon a GPU, and ``gpudock mig plan``.

Cordoning takes a GPU out of placement: the scheduler and the applier place
nothing on a GPU whose health is not ``ok``. Jobs running there keep running
(a cordon is not a drain; ``gpudock cancel`` or ``requeue`` them if they must
go). Uncordoning brings back a cordoned GPU, or one that a health event
quarantined, once the admin has reset or replaced it.
"""

from __future__ import annotations

import re
from collections import Counter

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpudock.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from gpudock.core.inventory import Gpu, GpuHealth
from gpudock.core.job import JobState
from gpudock.core.mig import profile_syntax_problem
from gpudock.core.mig_plan import MigPlan, PlanGpu, plan_mig
from gpudock.runtime.context import RuntimeContext
from gpudock.store import inventory as inv_store
from gpudock.store.models import GpuRow, JobRow
from gpudock.store.tokens import Principal

WANT_PATTERN = r"^([^=\s]+)=([0-9]{1,4})$"
"""``PROFILE=COUNT`` as ``GET /v1/mig/plan``'s schema states it (the profile checked after)."""
_WANT_RE = re.compile(WANT_PATTERN)


class GpuAdminService:
    def __init__(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def cordon(self, uuid: str, principal: Principal, reason: str | None = None) -> Gpu:
        """Take GPU ``uuid`` out of placement. ``Conflict`` when it is already out."""
        _admin(principal, "cordon a GPU")
        with self.ctx.db.write() as session:
            gpu = _gpu(session, uuid)
            if gpu.health is not GpuHealth.OK and gpu.health is not GpuHealth.UNHEALTHY:
                raise Conflict(
                    f"GPU {uuid} is already {gpu.health.value}"
                    + (f" ({gpu.health_reason})" if gpu.health_reason else "")
                )
            why = f"cordoned by {principal.user}" + (f": {reason}" if reason else "")
            done = inv_store.set_gpu_health(
                session, uuid, GpuHealth.CORDONED, why, self.ctx.clock()
            )
        assert done is not None
        return done

    def uncordon(self, uuid: str, principal: Principal) -> Gpu:
        """Bring back a cordoned or quarantined GPU; ``Conflict`` for any other."""
        _admin(principal, "uncordon a GPU")
        with self.ctx.db.write() as session:
            gpu = _gpu(session, uuid)
            if not gpu.health.sticky:
                hint = {
                    GpuHealth.OK: "it is in service",
                    GpuHealth.UNHEALTHY: "NVML could not query it; restart the server once "
                    "it is fixed, and discovery brings it back",
                    GpuHealth.MISSING: "discovery no longer sees it",
                }[gpu.health]
                raise Conflict(f"GPU {uuid} is {gpu.health.value}, not cordoned: {hint}")
            done = inv_store.set_gpu_health(session, uuid, GpuHealth.OK, None, self.ctx.clock())
        assert done is not None
        self.ctx.wake_scheduler.set()  # it takes placements again
        return done

    def mig_plan(self, wanted: list[str]) -> MigPlan:
        """A MIG layout per GPU for the MIG devices pending jobs ask for, plus ``wanted``
        (``PROFILE=COUNT`` each); ``InvalidInput`` for a malformed one. Changes nothing."""
        extra = parse_wanted(wanted)
        with self.ctx.db.read() as session:
            demand = pending_mig_demand(session) + extra
            gpus = inv_store.list_gpus(session)
            migs = inv_store.list_mig_devices(session)
        plan_gpus = [
            PlanGpu(
                node=g.node,
                index=g.index,
                uuid=g.uuid,
                name=g.name,
                mig_mode=g.mig_mode,
                busy=not g.idle or g.health is not GpuHealth.OK,
                idle_devices=tuple(
                    m.profile for m in migs if m.parent_uuid == g.uuid and m.job is None
                ),
                busy_devices=tuple(
                    m.profile for m in migs if m.parent_uuid == g.uuid and m.job is not None
                ),
            )
            for g in gpus
        ]
        return plan_mig(plan_gpus, demand)


def parse_wanted(items: list[str]) -> Counter[str]:
    """``["1g.10gb=2", ...]`` as a Counter; ``InvalidInput`` naming the bad item."""
    found: Counter[str] = Counter()
    for item in items:
        match = _WANT_RE.fullmatch(item.strip())
        if match is None:
            raise InvalidInput(f"want {item!r} must be PROFILE=COUNT, e.g. 1g.10gb=2", field="want")
        if (problem := profile_syntax_problem(match[1])) is not None:
            raise InvalidInput(problem, field="want")
        found[match[1]] += int(match[2])
    return found


def pending_mig_demand(session: Session) -> Counter[str]:
    """``{profile: count}`` over PENDING jobs that ask for a MIG device (``mig``)."""
    profile = JobRow.spec["mig"].as_string()
    stmt = select(profile).where(JobRow.state == JobState.PENDING.value, profile.is_not(None))
    return Counter(p for p in session.scalars(stmt) if p)


def _gpu(session: Session, uuid: str) -> Gpu:
    row = session.get(GpuRow, uuid)
    if row is None:
        raise NotFound(f"GPU {uuid} not found")
    found = next(g for g in inv_store.list_gpus(session, row.node) if g.uuid == uuid)
    return found


def _admin(principal: Principal, what: str) -> None:
    if not principal.is_admin:
        raise Forbidden(f"only an admin may {what}")
