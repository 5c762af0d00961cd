"""Elastic jobs in the cycle (``gpudock.core.elastic``): they grow only into GPUs no job
waits for, and give back what they hold above their minimum before anyone is preempted.

Step 3 places an elastic job as a job of its minimum (``JobRequest.gpus``); nothing
else of the cycle knows a job is elastic. Two steps here do:

* **5, first: shrink** (``shrink``). A blocked job that the profile's filters
  would admit on a node once the ``elastic: restart`` jobs there gave back their
  GPUs above their minimum preempts those jobs (the cheapest such set, by
  ``preemption.choose_victims`` over views that hold only those GPUs, asking
  the cycle's ``PostFilter``), under the preemption rules: never a protected
  job, and only when the restart pays for itself (``preemption_rules.py``).
  They restart at their minimum, as the next cycle places them. Only then does
  ordinary preemption (priority, reclaim) run, for the jobs still blocked.
* **6: grow** (``grow``), only when no job of the cycle is blocked and nothing is
  preempted: every elastic job placed this cycle takes the free GPUs of its
  node up to its ``max_gpus``; then every running ``elastic: restart`` job below
  its ``max_gpus`` with free GPUs of its own product on its node gets a
  ``Resize``: it is restarted (the store requeues it without using a retry)
  and the next cycle places it again, grown to what is free then. The GPUs it
  would grow into are held, so no two jobs count them. Its queue's quota and
  user cap bound the growth as they bound any placement, and the profile's
  filters must admit the job at its grown size on the node with its own GPUs
  counted free (``PostFilter.fits_after``; a running job is asked with the
  fields it carries: GPUs, CPUs, memory, queue and user).

Pure, like the whole cycle; the same on the generic and accelerated paths
(neither reads the verdict cache; the ``PostFilter`` is the accelerator's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from gpudock.core.job import PendingReason
from gpudock.scheduler.admission import QueueAdmission
from gpudock.scheduler.capacity import CycleState, GpuState, usable_now
from gpudock.scheduler.post_filter import PostFilter
from gpudock.scheduler.preemption import choose_victims, may_preempt, running_by_node
from gpudock.scheduler.preemption_rules import commit
from gpudock.scheduler.running import RunningIndex
from gpudock.scheduler.snapshot import JobRequest, Placement, Plan, Resize, RunningJob
from gpudock.scheduler.victim_sets import VictimSet

__all__ = ["grow", "grow_placements", "may_grow", "resizes", "shrink", "surplus"]


class Taker(Protocol):
    """Step 5's victim finder, told which victims shrinking took (``VictimFinder.take``)."""

    def take(self, choice: VictimSet) -> None: ...


def may_grow(job: RunningJob) -> bool:
    """An ``elastic: restart`` job below its maximum, not stopping: a cycle may resize it
    (the controller runs one for it even when nothing is pending)."""
    return job.elastic is not None and not job.stopping and len(job.gpu_uuids) < job.elastic[1]


def surplus(job: RunningJob) -> RunningJob | None:
    """``job`` holding only its GPUs above its minimum, or None (not elastic, or at it).

    Only ``elastic: restart`` jobs (``RunningJob.elastic`` set) are shrunk; the
    view frees no CPUs and no host memory, since the job keeps them when it restarts.
    """
    if job.elastic is None or job.memory_per_gpu is not None:
        return None
    low = job.elastic[0]
    if len(job.gpu_uuids) <= low:
        return None
    return replace(job, gpu_uuids=job.gpu_uuids[low:], cpus=None, memory=None)


def shrink(
    blocked: Sequence[JobRequest],
    state: CycleState,
    running: RunningIndex,
    waiting: frozenset[int],
    finder: Taker,
    plan: Plan,
    feasibility: PostFilter,
) -> list[JobRequest]:
    """Step 5, first: blocked jobs take back elastic jobs' GPUs above their minimum.

    Each job of ``blocked`` (in order; not those in ``waiting``, whose victims are
    still stopping) that fits once some elastic jobs of one node gave those GPUs
    back preempts them (``plan.preemptions``, with a ``priority`` reason first),
    if they are not protected and the restart pays for itself (``running.rules``:
    ``preemption_rules.py``); ``finder`` takes them, so that ordinary preemption
    does not choose them again. ``feasibility``: the cycle's ``PostFilter``.
    Returns the jobs still blocked, for ordinary preemption (a job whose shrink
    would not pay for itself too).
    """
    now, rules = running.now, running.rules
    by_id = {job.id: job for job in running.running}
    spare = [s for s in map(surplus, running.running) if s is not None]
    if not spare:
        return list(blocked)
    taken: set[int] = set()
    left: list[JobRequest] = []
    for job in blocked:
        choice = None
        if job.id not in waiting and job.gpus > 0 and may_preempt(job):  # GPUs alone
            holders = running_by_node([s for s in spare if s.id not in taken])
            nodes = [name for name in holders if name in state.views]
            choice = choose_victims(job, nodes, holders, lambda _: True, now, feasibility, rules)
        if choice is None:
            left.append(job)
            continue
        victims = tuple(by_id[v.id] for v in choice.victims)
        why = f"job {job.id} (taking back GPUs above the elastic minimum)"
        made = commit(job, choice.node, victims, why, rules, now)
        if isinstance(made, PendingReason):
            left.append(job)
            continue
        taken.update(v.id for v in victims)
        finder.take(VictimSet(choice.node, victims))
        plan.preemptions.extend(made)
        ids = ", ".join(str(v.id) for v in victims)
        reason = PendingReason(
            "priority",
            f"restarting elastic job {ids} at its minimum on node {choice.node}",
            "starts on the GPUs it gives back",
        )
        plan.pending[job.id] = [reason, *plan.pending.get(job.id, [])]
    return left


def grow(
    state: CycleState,
    plan: Plan,
    placed: dict[int, JobRequest],
    running: Sequence[RunningJob],
    admission: QueueAdmission | None,
    feasibility: PostFilter,
) -> None:
    """Step 6 (module doc); the caller checks that no job of the cycle is blocked.

    ``placed``: the cycle's elastic placements' requests, by job id; ``feasibility``: the
    cycle's ``PostFilter``.
    """
    grow_placements(state, plan, placed, admission, feasibility)
    plan.resizes.extend(resizes(state, running, admission, feasibility))


def grow_placements(
    state: CycleState,
    plan: Plan,
    placed: dict[int, JobRequest],
    admission: QueueAdmission | None,
    feasibility: PostFilter,
) -> None:
    """Step 6a: each elastic placement of ``plan`` takes free GPUs of its node, up to its
    ``max_gpus``, as many as its quota and the filters admit; the lowest free indices."""
    for i, placement in enumerate(plan.placements):
        job = placed.get(placement.job_id)
        if job is None or job.max_gpus is None:
            continue
        node = state.nodes[placement.node]
        free = [g.index for g in node.gpus if usable_now(job, g)]
        more = _allowed(job, min(job.max_gpus - job.gpus, len(free)), admission)
        own = RunningJob(
            job.id, job.queue, job.priority, placement.node, placement.gpu_uuids, None, None,
            cpus=job.cpus, memory=job.memory,
        )  # fmt: skip
        more = _admitted(job, more, own, feasibility)
        if more == 0:
            continue
        extra = replace(job, gpus=more, cpus=None, memory=None)  # CPUs and memory: taken
        taken = state.reserve(extra, placement.node, free[:more])
        if admission is not None:
            admission.charge(extra, taken)
        gpus = placement.gpu_uuids + taken.gpu_uuids
        plan.placements[i] = Placement(job.id, placement.node, gpus, None)


def resizes(
    state: CycleState,
    running: Sequence[RunningJob],
    admission: QueueAdmission | None,
    feasibility: PostFilter,
) -> list[Resize]:
    """Step 6b: ``elastic: restart`` jobs below their ``max_gpus`` that could grow on
    their node now; the GPUs they would take are held for them."""
    out: list[Resize] = []
    for job in sorted(running, key=lambda r: r.id):
        if job.elastic is None or job.stopping or job.memory_per_gpu is not None:
            continue
        held = len(job.gpu_uuids)
        if held >= job.elastic[1] or job.node not in state.views:
            continue
        node = state.nodes[job.node]
        own = {g.name for g in node.gpus if g.uuid in job.gpu_uuids}
        request = JobRequest(
            job.id, held, job.submitted_at, queue=job.queue, user=job.user,
            cpus=job.cpus, memory=job.memory,
        )  # fmt: skip
        free = [g.index for g in node.gpus if g.name in own and usable_now(request, g)]
        more = _allowed(replace(request, gpus=1), min(job.elastic[1] - held, len(free)), admission)
        more = _admitted(request, more, job, feasibility)
        if more == 0:
            continue
        extra = replace(request, gpus=more, cpus=None, memory=None)
        state.hold(extra, job.node, free[:more])
        if admission is not None:
            admission.charge(extra, Placement(job.id, job.node, _uuids(node.gpus, free[:more])))
        out.append(Resize(job.id, job.node, held, held + more))
    return out


def _admitted(job: JobRequest, more: int, own: RunningJob, feasibility: PostFilter) -> int:
    """The most of ``more`` extra GPUs (down to 0) with which the profile's filters admit
    ``job`` on its node, its own GPUs (``own``) counted free."""
    while more > 0:
        grown = replace(job, gpus=job.gpus + more, max_gpus=None)
        if feasibility.fits_after(grown, own.node, (own,)):
            return more
        more -= 1
    return 0


def _allowed(job: JobRequest, more: int, admission: QueueAdmission | None) -> int:
    """The most of ``more`` extra GPUs (down to 0) the job's queue and user cap admit."""
    if admission is None:
        return max(0, more)
    while more > 0:
        extra = replace(job, gpus=more, cpus=None, memory=None)
        if admission.over_user_limit(extra) is None and admission.refuse(extra) is None:
            return more
        more -= 1
    return 0


def _uuids(gpus: Sequence[GpuState], indices: Sequence[int]) -> tuple[str, ...]:
    wanted = set(indices)
    return tuple(g.uuid for g in gpus if g.index in wanted)
