"""Dynamic priorities during a replay: remaining-time ranks, refreshed as jobs run,
and sweeps kept in submission order (``SimPolicy.priority``, ``SimPolicy.siblings``).

Part of the simulator's chain (``state.py``); methods of ``Simulator``.
"""

from __future__ import annotations

import math

from mypy_extensions import mypyc_attr

from gpudock.sim.estimate import SIBLING_GAP
from gpudock.sim.jobs import (
    _ACTIVE,
    REPRIORITIZE_EVERY,
    SWEEP_GAP,
    _Job,
    _with_priority,
)
from gpudock.sim.policies import remaining_priority
from gpudock.sim.state import SimState


@mypyc_attr(allow_interpreted_subclasses=True)  # tests subclass ``Simulator``
class DynamicPriorities(SimState):
    """The priorities the scheduler sees for each job, as they change (module doc)."""

    # ── dynamic priorities ───────────────────────────────────────────────

    def _reprioritize(self, now: float, pending: dict[int, _Job], running: dict[int, _Job]) -> None:
        """Refresh remaining-time priorities that may have moved by a step (about 1%).

        A pending job's attained time stands still, so its priority is
        recomputed only when it arrives or returns to pending and when what
        the estimator learnt about its class changes (its ``version``). A
        running job's is recomputed at most every ``REPRIORITIZE_EVERY``
        seconds or 1% of its remaining time, whichever is longer, as a live
        scheduler refreshes priorities periodically rather than every second.
        Sets ``_due``: the earliest next refresh of a running job.
        """
        fresh, self._fresh = self._fresh, []
        versions, srtf = self._versions, self.policy.priority == "srtf"
        versions.clear()  # versions move only when jobs finish, between cycles
        self._ranks.clear()  # so do ranks: this cycle's, by class and attained time
        if self._estimator.changes != self._seen_changes:  # some class learnt: check them all
            self._seen_changes = self._estimator.changes
            fresh = list(pending.values())
        unranked = -math.inf
        for job in fresh:
            if job.state != "pending":
                continue
            known = 0 if srtf else versions.get(job.klass)  # ``_version``, inlined
            version = self._version(job) if known is None else known
            if job.reprioritize_at == unranked or version != job.rank_version:
                remaining = self._remaining(job, job.ran - job.wasted, version) + job.owed
                self._set_priority(job, now, remaining)
            request = job.request
            if request.priority != job.priority or request.remaining != job.ranked_as:
                # a running job's request is left stale; the scheduler reads its estimate
                job.request = _with_priority(request, job.priority, job.ranked_as)
        due = math.inf
        for job in running.values():
            if job.state != "running":
                continue
            if now >= job.reprioritize_at:
                ran = job.attained(now)
                known = 0 if srtf else versions.get(job.klass)  # ``_version``, inlined
                version = self._version(job) if known is None else known
                if (
                    not srtf
                    and version == job.rank_version
                    and job.rank_from <= ran < job.rank_until
                ):
                    remaining = job.rank  # ``_remaining``'s kept rank, inlined
                else:
                    remaining = self._remaining(job, ran, version)
                remaining += job.owed_at(now)  # the work its last stop lost, to redo
                job.estimated_end = now + remaining  # the scheduler weighs preemptions by it
                # ``_set_priority``, inlined: this runs for about every running job every cycle
                step = 0.01 * remaining
                job.reprioritize_at = now + (
                    step if step > REPRIORITIZE_EVERY else REPRIORITIZE_EVERY
                )
                if remaining != job.ranked_as:
                    job.ranked_as = remaining
                    priority = remaining_priority(remaining)
                    if priority != job.priority:
                        job.priority, job.running_views = priority, ()
            if job.reprioritize_at < due:
                due = job.reprioritize_at
        self._due = due

    # ── sweeps and siblings (``SimPolicy.siblings``) ───────────────────────────

    def _sweeps(self) -> None:
        """Link each job to the one before it in its sweep, and list each class's jobs.

        A *sweep* is a run of jobs of one class (queue and GPU count) each submitted
        at most ``SWEEP_GAP`` seconds after the one before it: a burst, as a user
        submitting a hyper-parameter sweep makes. Jobs go by submission, then number
        (the order they arrive in), so the job before another always arrives first.
        """
        last: dict[tuple[str, float], _Job] = {}
        jobs = [job for job in self._jobs if job.state != "skipped"]
        for job in sorted(jobs, key=lambda j: (j.trace.submit_time, j.request.id)):
            of_class = self._of_class.setdefault(job.klass, [])
            job.place = len(of_class)
            of_class.append(job.request.id)
            previous = last.get(job.klass)
            if previous is not None and job.trace.submit_time - previous.trace.submit_time <= (
                SWEEP_GAP
            ):
                job.before, previous.after = previous.request.id, job.request.id
            last[job.klass] = job

    def _hold_sweeps(self) -> None:
        """Keep each sweep in submission order: the priority the scheduler sees for a job
        is at most that of the job before it in its sweep, while that one is pending,
        running or stopping. Equal priorities go by submission, and a preemptor must
        rank strictly higher, so a job never overtakes or preempts an earlier job of its
        sweep; and a job whose predecessor has run long without finishing ranks no
        better than it (sweeps' run times are alike), before any of them has finished.
        """
        jobs = self._jobs
        shown: dict[int, int] = {}
        for number, job in self._swept.items():  # in arrival order: the job before first
            priority = job.priority
            held = shown.get(job.before)
            if held is None:  # the job before it is the first of those active in its sweep
                held = jobs[job.before - 1].priority
            if held < priority:
                priority = held
            shown[number] = priority
            if job.state != "pending":
                self._show(job, priority)
            elif job.request.priority != priority:  # ``_show`` of a pending job, inlined
                job.request = _with_priority(job.request, priority, job.request.remaining)

    @staticmethod
    def _show(job: _Job, priority: int) -> None:
        """Let the scheduler see ``priority`` for ``job``: a pending job's request carries
        it, a running or stopping job's snapshot entries (``shown``)."""
        if job.state == "pending":
            if job.request.priority != priority:
                job.request = _with_priority(job.request, priority, job.request.remaining)
        elif (job.priority if job.shown is None else job.shown) != priority:
            job.shown = priority
            job.running_views = ()

    def _unhold(self, done: _Job) -> None:
        """``done`` finished: the job after it in its sweep is no longer held by it, and
        shows its own priority again (the jobs after that one follow at the next cycle)."""
        job = self._jobs[done.after - 1] if done.after else None
        if job is None or self._swept.pop(job.request.id, None) is None:
            return
        self._show(job, job.priority)
        job.shown = None  # its own priority; also for a pending job, which may run again

    def _new_sibling(self, done: _Job) -> None:
        """``done`` finished: the active jobs of its class submitted within ``SIBLING_GAP``
        of it may have a new close sibling; those that do are ranked again."""
        numbers = self._of_class[done.klass]
        submitted, at = done.trace.submit_time, done.place
        for step, end in ((-1, -1), (1, len(numbers))):
            for i in range(at + step, end, step):
                job = self._jobs[numbers[i] - 1]
                if abs(job.trace.submit_time - submitted) > SIBLING_GAP:
                    break
                if job.state not in _ACTIVE:
                    continue
                queue, gpus = job.klass  # no ``*`` (see ``_run``)
                sibling = self._estimator.sibling(queue, gpus, job.trace.submit_time)
                if sibling != job.sibling:
                    job.sibling, job.rank_version = sibling, -1
                    if job.state == "pending":
                        self._fresh.append(job)
                    else:
                        job.reprioritize_at = -math.inf

    def _version(self, job: _Job) -> int:
        """Changes whenever a job's remaining time may have changed at a fixed attained time
        (the estimator's ``version`` of its class, read once per cycle)."""
        if self.policy.priority == "srtf":
            return 0  # the true remaining time depends on the attained time only
        version = self._versions.get(job.klass)
        if version is None:
            queue, gpus = job.klass  # no ``*`` (see ``_run``)
            version = self._versions[job.klass] = self._estimator.version(queue, gpus)
        return version

    def _remaining(self, job: _Job, ran: float, version: int) -> float:
        """The job's remaining time after ``ran`` seconds of service: true (``srtf``) or
        the estimator's, which is kept with the attained times it holds for and read
        again only outside them or once its class's ``version`` has moved.

        Within a cycle the estimator stands still, so jobs of one class with the
        same attained time (common: starts and stops fall on cycle boundaries)
        share one reading (``_ranks``, emptied every cycle)."""
        if self.policy.priority == "srtf":
            job.rank_version = version
            return job.trace.duration - min(ran, job.trace.duration)
        if version != job.rank_version or not job.rank_from <= ran < job.rank_until:
            key = (job.klass, ran, job.sibling)
            found = self._ranks.get(key)
            if found is None:
                queue, gpus = job.klass  # no ``*`` (see ``_run``)
                found = self._ranks[key] = self._estimator.ranked(queue, gpus, ran, job.sibling)
            job.rank, job.rank_until = found
            job.rank_from, job.rank_version = ran, version
        return job.rank

    def _set_priority(self, job: _Job, now: float, remaining: float) -> None:
        """``job.priority`` from ``remaining``; a changed priority drops its snapshot entries
        (a pending job's request is brought up to it by the caller). ``_reprioritize``
        inlines it for running jobs: a change here goes there too (a test compares both)."""
        job.reprioritize_at = now + max(REPRIORITIZE_EVERY, 0.01 * remaining)
        if remaining != job.ranked_as:  # the priority is a function of the remaining time
            job.ranked_as = remaining
            priority = remaining_priority(remaining)
            if priority != job.priority:
                job.priority = priority
                job.running_views = ()
