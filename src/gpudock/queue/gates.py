"""Gates before admission: job dependencies and job-array limits.

Pure (no I/O, no clock), like the rest of ``gpudock.queue``. The server runs
them on each cycle's pending jobs before ``schedule`` (``runtime/gating.py``);
a job a gate holds is left out of that cycle, with its reason::

    gate 1  dependencies  ``after``: every named job has ended (any way);
                          ``after_ok``: every named job SUCCEEDED. A job whose
                          ``after_ok`` dependency ended otherwise (or is gone)
                          is cancelled with that reason (``failed_dependency``),
                          never left waiting; cancellations propagate down a
                          chain within one call.
    gate 2  array limit   at most ``LIMIT`` tasks of one array hold resources
                          at once: the first ``LIMIT - active`` waiting tasks,
                          in the cycle's order, pass; the others wait.

A job held by gate 1 takes no slot of gate 2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpudock.core.job import JobState, PendingReason

DEPENDENCY = "dependency"  # PendingReason.layer of gate 1
ARRAY = "array"  # PendingReason.layer of gate 2


@dataclass(frozen=True, slots=True)
class Gated:
    """A pending job with a dependency or in a limited array."""

    job_id: int
    after: tuple[int, ...] = ()
    after_ok: tuple[int, ...] = ()
    array_id: int | None = None
    array_limit: int | None = None


@dataclass(frozen=True, slots=True)
class GateVerdict:
    """What the gates decided: held jobs wait with a reason; cancelled ones end."""

    held: dict[int, PendingReason] = field(default_factory=dict)
    cancelled: dict[int, str] = field(default_factory=dict)

    @property
    def excluded(self) -> frozenset[int]:
        return frozenset(self.held) | frozenset(self.cancelled)


def failed_dependency(job: Gated, states: Mapping[int, JobState]) -> str | None:
    """Gate 1's verdict of cancellation: the reason, when an ``after_ok`` job can no
    longer succeed (it ended other than SUCCEEDED, or no longer exists); else None."""
    for dep in job.after_ok:
        state = states.get(dep)
        if state is None:
            return f"dependency job {dep} no longer exists (after-ok)"
        if state.terminal and state is not JobState.SUCCEEDED:
            return f"dependency job {dep} ended {state.value} (after-ok)"
    return None


def waiting_dependency(job: Gated, states: Mapping[int, JobState]) -> PendingReason | None:
    """Gate 1's verdict of waiting: why ``job`` must wait for its dependencies, or None.

    A missing ``after`` job counts as ended. Call ``failed_dependency`` first.
    """
    waiting = [(d, "end") for d in job.after if (s := states.get(d)) is not None and not s.terminal]
    waiting += [(d, "succeed") for d in job.after_ok if states.get(d) is not JobState.SUCCEEDED]
    if not waiting:
        return None
    dep, verb = waiting[0]
    state = states.get(dep)
    more = f" and {len(waiting) - 1} more" if len(waiting) > 1 else ""
    return PendingReason(
        layer=DEPENDENCY,
        message=f"waits for job {dep} to {verb} (now {state.value if state else '?'}){more}",
        counterfactual=f"starts once job {dep}{more} {'ends' if verb == 'end' else 'succeeds'}",
    )


def array_limit(
    order: Sequence[Gated], active: Mapping[int, int], held: Mapping[int, object]
) -> dict[int, PendingReason]:
    """Gate 2: the tasks, of ``order`` (the cycle's order), over their array's limit.

    ``active`` counts each array's tasks holding resources now; jobs in
    ``held`` (gate 1) take no slot.
    """
    left: dict[int, int] = {}
    out: dict[int, PendingReason] = {}
    for job in order:
        if job.array_id is None or job.array_limit is None or job.job_id in held:
            continue
        running = active.get(job.array_id, 0)
        slots = left.setdefault(job.array_id, job.array_limit - running)
        if slots > 0:
            left[job.array_id] = slots - 1
            continue
        out[job.job_id] = PendingReason(
            layer=ARRAY,
            message=(
                f"array {job.array_id}: {running} of its tasks hold resources "
                f"(at most {job.array_limit} at once)"
            ),
            counterfactual=f"starts when a task of array {job.array_id} ends",
        )
    return out


def gate(
    order: Sequence[int],
    gated: Mapping[int, Gated],
    states: Mapping[int, JobState],
    active: Mapping[int, int],
) -> GateVerdict:
    """Run gates 1 and 2 over the pending job ids ``order`` (the cycle's order).

    ``gated`` holds the jobs with a dependency or array limit (others pass);
    ``states`` the current state of every job they name; ``active`` each
    array's tasks holding resources. Jobs named in ``gated`` but not in
    ``order`` are ignored.
    """
    jobs = [gated[i] for i in order if i in gated]
    known = dict(states)
    cancelled: dict[int, str] = {}
    while True:  # a cancelled job fails its own after-ok dependents too
        new = {
            j.job_id: why
            for j in jobs
            if j.job_id not in cancelled and (why := failed_dependency(j, known)) is not None
        }
        if not new:
            break
        cancelled.update(new)
        known.update(dict.fromkeys(new, JobState.CANCELLED))
    held = {
        j.job_id: wait
        for j in jobs
        if j.job_id not in cancelled and (wait := waiting_dependency(j, known)) is not None
    }
    rest = [j for j in jobs if j.job_id not in cancelled]
    held.update(array_limit(rest, active, held))
    return GateVerdict(held=held, cancelled=cancelled)
