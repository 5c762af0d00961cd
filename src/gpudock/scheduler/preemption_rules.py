"""Step 5's rules: who may be a victim now, and whether a preemption pays for itself.

A restart is never free: the container starts again, the model loads again, and
the work since the job's last checkpoint is lost. Every reason to preempt (priority,
reclaim by a queue under its fair share, elastic shrink), on the reference and the
accelerated victim search, in the server and in the simulator, obeys the same three
named rules (config ``scheduler.preemption``, ``PreemptionRules``):

1. **protected** (``protected_for``). A job is no victim for the first
   ``protected_for(job)`` seconds of each run, counted from its (re)start: the longest
   of its own ``min_runtime``, the cluster's ``exempt_time`` (Slurm's
   ``PreemptExemptTime``) and ``exempt_restarts`` times its restart cost (a restart
   then buys at least that much run, so restarts lose at most ``1 / (1 + N)`` of the
   GPU time a job holds). A job that has not started yet is not protected: it has
   run nothing to lose. The victim search never offers a protected job
   (``victim_sets.preemptible_now``).
2. **pays for itself** (``weigh``). The victim set chosen for a job (the cheapest,
   as before) is preempted only when the expected *gain* exceeds the *cost*
   charged::

       cost = sum over victims (restart cost + work lost since its last checkpoint)
       gain = max over victims (its expected remaining time)
              - victims * the preemptor's expected remaining time

   The exchange argument: without the preemption the preemptor waits for the
   victims to end; with it, each victim waits while the preemptor runs, and then
   pays its restart. A victim's expected remaining time is the caller's estimate
   (``RunningJob.estimated_end``, the simulator's rank), never more than its
   ``max_runtime`` allows, and unbounded when neither is known; the preemptor's is
   ``JobRequest.remaining``, 0 when unknown (its priority class speaks for it). So a
   server that knows no estimates still refuses to stop jobs that would all end
   before a restart could pay off.
3. **hysteresis** (``weigh``'s ``outranked``). Ranks that drift as jobs run (a
   remaining-time estimate) would let two jobs of nearly equal rank swap places
   again and again: every victim must be expected to run at least ``1 +
   hysteresis`` times as long as the preemptor. Once a job has taken another's
   place, that one takes it back only when their ranks have moved apart by that
   factor again (plus rule 2's cost). Without estimates the rule never refuses;
   static priorities do not drift, and equal priorities never preempt each other.

A set that breaks rule 2 or 3 is not taken: the job waits, with a reason that says
what the preemption would have cost and gained, and its victims stay candidates for
the jobs after it.

A restart's cost is the job's declared ``restart_cost``, else the larger of the
cluster's ``restart_cost`` and the job's own measured start-to-running time
(``RunningJob.start_seconds``). The work lost is the run since its last checkpoint,
when it declares a ``checkpoint_interval``, else none (the restart cost covers it).
Pure functions of the running job, the request and the time: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpudock.core.job import PendingReason
from gpudock.core.units import format_duration
from gpudock.scheduler.snapshot import JobRequest, Preemption, RunningJob
from gpudock.scheduler.wording import victims_text

__all__ = ["DEFAULT_RULES", "PreemptionRules", "Weighing", "commit"]


@dataclass(frozen=True, slots=True)
class Weighing:
    """What a preemption is expected to gain, and what it costs, in seconds.

    ``gain`` is ``inf`` when a victim's remaining time is unknown and unbounded;
    ``costs`` is each victim's charged cost, in the order weighed.
    """

    gain: float
    cost: float
    costs: tuple[float, ...]
    outranked: bool = True  # rule 3: every victim is expected to take long enough longer
    soonest: float = math.inf  # the shortest expected remaining time of a victim
    needs: float = 0.0  # the preemptor's expected run time (0: unknown)

    @property
    def worth(self) -> bool:
        """Rules 2 and 3: the gain exceeds the cost, and the ranks are far enough apart."""
        return self.outranked and self.gain > self.cost


@dataclass(frozen=True, slots=True)
class PreemptionRules:
    """The preemption step's rules and their settings (module doc).

    ``restart_cost``: seconds a restart costs a job that declares none (at least;
    its measured start-to-running time may be longer). ``exempt_time``: seconds
    every job is protected after each (re)start. ``hysteresis``: how much sooner
    (as a fraction) a preemptor must be expected to finish than its victims.
    """

    restart_cost: float = 0.0
    exempt_time: float = 0.0
    hysteresis: float = 0.0
    exempt_restarts: float = 0.0  # rule 1: also this many times its restart cost

    # ── rule 1: protected ───────────────────────────────────────────────

    def protected_for(self, victim: RunningJob) -> float | None:
        """Seconds after its (re)start during which ``victim`` is no victim: the longer of
        its ``min_runtime`` and ``exempt_time``; None when it has neither."""
        span = self.exempt_time
        if self.exempt_restarts > 0.0:
            amortise = self.exempt_restarts * self.restart_cost_of(victim)
            if amortise > span:
                span = amortise
        least = victim.min_runtime
        if least is None:
            return span if span > 0.0 else None
        return least if least >= span else span

    def protected_until(self, victim: RunningJob) -> float | None:
        """When ``victim``'s protection ends; None when it has none or has not started."""
        span = self.protected_for(victim)
        if span is None or victim.started_at is None:
            return None
        return victim.started_at + span

    def protected(self, victim: RunningJob, now: float) -> bool:
        """Rule 1: ``victim`` is inside its protected time at ``now``."""
        span, started = self.protected_for(victim), victim.started_at
        return span is not None and started is not None and now - started < span

    # ── rule 2: what a preemption costs and gains ───────────────────────

    def restart_cost_of(self, victim: RunningJob) -> float:
        """Seconds a restart costs ``victim``: declared, else the cluster's or its measured
        start-to-running time, whichever is longer."""
        if victim.restart_cost is not None:
            return victim.restart_cost
        measured = victim.start_seconds
        if measured is not None and measured > self.restart_cost:
            return measured
        return self.restart_cost

    @staticmethod
    def lost_work(victim: RunningJob, now: float) -> float:
        """Seconds of run since ``victim``'s last checkpoint (0 without a declared interval)."""
        interval, started = victim.checkpoint_interval, victim.started_at
        if interval is None or interval <= 0.0 or started is None or now <= started:
            return 0.0
        return math.fmod(now - started, interval)

    def charged(self, victim: RunningJob, now: float) -> float:
        """What preempting ``victim`` at ``now`` costs it: restart plus lost work."""
        return self.restart_cost_of(victim) + self.lost_work(victim, now)

    @staticmethod
    def remaining(victim: RunningJob, now: float) -> float:
        """``victim``'s expected remaining run time: its estimate, never past what its
        ``max_runtime`` allows; ``inf`` when neither is known."""
        left = math.inf
        if victim.estimated_end is not None:
            left = max(0.0, victim.estimated_end - now)
        if victim.max_runtime is not None:
            start = victim.started_at if victim.started_at is not None else now
            bound = max(0.0, start + victim.max_runtime - now)
            if bound < left:
                left = bound
        return left

    @staticmethod
    def needs(job: JobRequest) -> float:
        """The preemptor's expected run time: its estimate (within its ``max_runtime``),
        else 0 (unknown: its priority class speaks for it)."""
        if job.remaining is None:
            return 0.0
        if job.max_runtime is not None and job.max_runtime < job.remaining:
            return job.max_runtime
        return max(0.0, job.remaining)

    def weigh(self, job: JobRequest, victims: Sequence[RunningJob], now: float) -> Weighing:
        """Rules 2 and 3 for ``job`` taking the place of ``victims``."""
        costs = tuple(self.charged(v, now) for v in victims)
        left = [self.remaining(v, now) for v in victims]
        needs = self.needs(job)
        outranked = min(left, default=math.inf) >= (1.0 + self.hysteresis) * needs
        gain = max(left, default=0.0) - len(victims) * needs
        soonest = min(left, default=math.inf)
        return Weighing(gain, sum(costs), costs, outranked, soonest, needs)


def commit(
    job: JobRequest,
    node: str,
    victims: Sequence[RunningJob],
    why: str,
    rules: PreemptionRules,
    now: float,
    layer: str = "priority",
) -> list[Preemption] | PendingReason:
    """The preemptions of ``victims`` (on ``node``) for ``job`` if they pay for themselves
    (``rules.weigh``: rules 2 and 3), each with the cost charged to its victim and the
    gain expected; else the reason, in ``layer``, why ``job`` does not preempt them.
    Where step 5 commits a choice, for every kind of preemption."""
    weighed = rules.weigh(job, victims, now)
    if not weighed.worth:
        return PendingReason(
            layer,
            f"not preempting {victims_text(victims)} on node {node}: {_costs(weighed)}",
            "starts when GPUs free up",
        )
    gain = weighed.gain if math.isfinite(weighed.gain) else None
    return [
        Preemption(v.id, job.id, why, cost, gain)
        for v, cost in zip(victims, weighed.costs, strict=True)
    ]


def _costs(weighed: Weighing) -> str:
    """``"a restart would cost 5m00s, more than the 1m20s it would gain"``, or why the
    ranks are too close (rule 3)."""
    if not weighed.outranked:
        return (
            f"one is expected to end in {format_duration(weighed.soonest)}, too soon after "
            f"this job's {format_duration(weighed.needs)} to swap places"
        )
    cost = format_duration(weighed.cost)
    if weighed.gain <= 0.0:
        return f"a restart would cost {cost} and gain nothing"
    return (
        f"a restart would cost {cost}, more than the {format_duration(weighed.gain)} it would gain"
    )


DEFAULT_RULES = PreemptionRules()
"""No restart cost, no protection beyond ``min_runtime``, no hysteresis: the rules of a
caller that configures none (tests, ``schedule`` without a ``preemption`` section)."""
