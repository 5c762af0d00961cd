"""Step 5's victim search: ``choose_victims``' answer without trying every node for every job.

``choose_victims`` (preemption.py) tries each node a blocked job could use: O(nodes x
victims) per job. ``VictimSearch`` gives the same answers, relying on three facts:

* **priority does not change a node's answer.** A node's candidates are tried in
  victim order, lowest priority first, so those a job of priority ``p`` may take are a
  prefix of them, and the greedy step stops at the same victim for every ``p`` or for
  none: a node's victim set depends on the job's placement key and queue only. The
  cheapest set over all nodes per (key, queue) (``boards.Board``) answers every job
  with that key whose priority is above its top victim's; else no node has one.
* **cheap lower bounds order the nodes.** A set costs ``(top priority, victims,
  seconds of work lost, node)``. A one-victim set costs exactly that of a victim whose
  release alone can free enough GPUs (``freed_alone``); a larger one at least ``(k-th
  lowest priority, k, the k shortest runs, node)``, k the fewest victims whose GPUs
  could make room (``multi_bound``). A board tries a node exactly only when one of its
  bounds comes up, and stops once the cheapest set found costs less than what comes
  next: usually after a handful of nodes.
* **a choice changes one node.** Chosen victims leave their node's candidates
  (``take``); each board that looked at that node looks again.

The reclaim kind (``any_rule``) tries every node the job could use, skipping the exact
trial where a bound already costs more than the cheapest set found. Whether a job could
use a node, and the trials, are the cycle's ``PostFilter``'s: the profile's own filters,
whatever they are. The bounds count only GPUs, which every set that lets the job fit
must free.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate

from gpudock.scheduler.capacity import AnyGpu, CycleState
from gpudock.scheduler.post_filter import PostFilter
from gpudock.scheduler.release import released_state, releases_needed, usable_bound
from gpudock.scheduler.running import RunningIndex
from gpudock.scheduler.snapshot import JobRequest, RunningJob
from gpudock.scheduler.victim_sets import Cost, VictimSet, cost_of, seconds_run

Singles = dict[str, dict[int, list[RunningJob]]]  # queue -> held -> candidates


def freed_alone(victim: RunningJob, gpus: Mapping[str, list[AnyGpu]]) -> tuple[int, int]:
    """At most how many more of a node's GPUs (``gpus``: by uuid) a job could use once
    ``victim`` alone stopped.

    ``(whole, shared)``: for a whole-GPU job (healthy GPUs of the victim that
    become idle, not idle now) and for a shared job of any share (healthy
    GPUs of the victim not held exclusively once it stopped).
    """
    uuids = victim.gpu_uuids
    whole = shared = 0
    for uuid in set(uuids):
        for gpu in gpus.get(uuid, ()):
            if not gpu.healthy:
                continue
            exclusive, used, shared_jobs = released_state(gpu, [victim] * uuids.count(uuid))
            if exclusive:
                continue
            shared += 1
            idle_now = not gpu.exclusive and gpu.shared_jobs == 0 and gpu.used_memory == 0
            whole += shared_jobs == 0 and used == 0 and not idle_now
    return whole, shared


class VictimSearch:
    """Cheapest victim sets for the blocked jobs of one cycle (step 5); see the module doc.

    ``state`` must not change while the search is used (step 5 only reads it).
    ``feasibility``: the cycle's ``PostFilter``.

    ``freed_alone`` of the victims on a node whose GPUs are the snapshot's is kept for the
    next cycle (``NodeRunning.gains``, in the running index): it depends on immutable
    snapshot objects only.
    """

    def __init__(self, state: CycleState, running: RunningIndex, feasibility: PostFilter) -> None:
        self.state = state
        self.now = running.now
        self.version: dict[str, int] = {}  # bumped when a node loses candidates
        self.log: list[str] = []  # nodes that lost candidates, in order
        self.taken: set[int] = set()  # ids of the victims chosen so far
        self._running = running.nodes
        self._feasibility = feasibility
        self._multis: dict[tuple[str, int, int | None], Multis] = {}
        self._most: dict[int | None, int] = {}  # share (None: whole GPUs) -> ``most_usable``
        self._gains: dict[int, tuple[int, int]] = {}  # id(victim) -> freed_alone
        self._gpus: dict[str, dict[str, list[AnyGpu]]] = {}  # node -> its GPUs by uuid
        self._left: dict[str, list[RunningJob]] = {}  # ``ready`` of the nodes that lost some
        # per queue, its candidates by ``held`` (what they could free alone), in order of
        # their one-victim cost: the index's streams when they are in that order (every
        # start before ``now``) and count ``held`` (uuids unique), else sorted here
        self.floor: dict[str, int] = running.floor  # per queue, the lowest candidate priority
        self.singles: Singles = running.streams
        if running.latest_start >= self.now or not state.unique_uuids:
            self.singles, self.floor = self._singles(running)

    def _singles(self, running: RunningIndex) -> tuple[Singles, dict[str, int]]:
        """``singles`` and ``floor``, sorted at ``now`` (priority, seconds run, node, -id)."""
        now = self.now
        ready = sorted(
            (
                v.priority,
                now - v.started_at if v.started_at is not None else 0.0,
                v.node,
                -v.id,
                id(v),
                v,
            )
            for node in running.nodes.values()
            for v in node.ready
        )
        singles: Singles = {}
        floor: dict[str, int] = {}
        for *_, victim in ready:
            floor.setdefault(victim.queue, victim.priority)
            held = singles.setdefault(victim.queue, {})
            held.setdefault(self.held(victim), []).append(victim)
        return singles, floor

    @property
    def nodes(self) -> Iterable[str]:
        """The nodes with running jobs, in the index's order (those ``ready`` may find)."""
        return self._running.keys()

    def ready(self, name: str) -> Sequence[RunningJob]:
        """Node ``name``'s candidates not taken, in victim order; read-only. Summarises
        a node only when asked (a cycle whose blocked jobs cannot preempt reads none)."""
        left = self._left.get(name)
        if left is not None:
            return left
        node = self._running.get(name)
        return () if node is None else node.ready

    def any_rule(self, job: JobRequest, eligible: Callable[[RunningJob], bool]) -> VictimSet | None:
        """``choose_victims`` with victims ``eligible`` says it may take, not yet taken."""
        best: tuple[Cost, list[RunningJob]] | None = None
        for name in self._running:
            candidates = [v for v in self.ready(name) if eligible(v)]
            if not candidates or not self.could_fit(job, name):
                continue
            bound = self.bound(job, name, candidates)
            if bound is None or (best is not None and bound > best[0]):
                continue
            found = self.trial(job, name, candidates)
            if found is not None and (best is None or found[0] < best[0]):
                best = found
        if best is None:
            return None
        return VictimSet(best[0][3], tuple(sorted(best[1], key=lambda v: v.id)))

    def take(self, choice: VictimSet) -> None:
        """The victims of ``choice`` are taken: no later job of the cycle may choose them."""
        ids = set(choice.ids)
        self.taken |= ids
        name = choice.node
        self._left[name] = [v for v in self.ready(name) if v.id not in ids]
        self.version[name] = self.version.get(name, 0) + 1
        self.log.append(name)

    def could_fit(self, job: JobRequest, name: str) -> bool:
        """Would the filters admit ``job`` on node ``name`` with nothing running there
        (``PostFilter.admits_empty``)? No victims help elsewhere."""
        return name in self.state.views and self._feasibility.admits_empty(job, name)

    def multis(self, job: JobRequest) -> Multis:
        """Nodes by ``multi_bound``, for every job of ``job``'s queue, GPU count and share."""
        share = job.gpu_memory if job.gpu_memory is not None and job.gpus > 0 else None
        key = (job.queue, job.gpus, share)
        found = self._multis.get(key)
        if found is None:
            found = self._multis[key] = Multis(self, job)
        return found

    def candidates(self, queue: str, name: str) -> Sequence[RunningJob]:
        """Node ``name``'s candidates of ``queue`` (not taken), in victim order; read-only."""
        if name not in self.version:  # none taken there: the index's list
            node = self._running.get(name)
            return () if node is None else node.queue(queue).candidates
        return [v for v in self._left.get(name, ()) if v.queue == queue]

    def pairs(self, queue: str) -> list[tuple[Cost, str]]:
        """``((priority of its second candidate, 2, -inf, node), node)`` for every node with
        two candidates of ``queue`` or more, in ``nodes`` order: what a set of two or more
        victims there costs at least (``Multis``' first bounds)."""
        out: list[tuple[Cost, str]] = []
        version = self.version
        for name, node in self._running.items():
            if name in version:  # some taken there
                candidates = self.candidates(queue, name)
            else:  # ``candidates``, inlined: this runs for every node
                candidates = node.queue(queue).candidates
            if len(candidates) >= 2:
                out.append(((float(candidates[1].priority), 2, -math.inf, name), name))
        return out

    def held(self, victim: RunningJob) -> int:
        """At most how many of its node's GPUs ``victim`` holds (``freed_alone`` is no more)."""
        if self.state.unique_uuids:
            return len(victim.gpu_uuids)
        gpus = self.gpus_by_uuid(victim.node)
        return sum(len(gpus.get(uuid, ())) for uuid in set(victim.gpu_uuids))

    def most_usable(self, job: JobRequest) -> int:
        """The most GPUs ``job`` could use now on one node, at least (``usable_bound``)."""
        share = job.gpu_memory if job.gpu_memory is not None and job.gpus > 0 else None
        most = self._most.get(share)
        if most is None:
            most = 0
            for fit in self.state.fit_all():  # ``fit`` of every node, in one pass
                usable = usable_bound(job, fit)
                if usable > most:
                    most = usable
            self._most[share] = most
        return most

    def need(self, job: JobRequest, name: str) -> int:
        """At least how many more GPUs ``job`` needs usable on ``name`` than it has now."""
        return job.gpus - usable_bound(job, self.state.fit(name))

    def gpus_by_uuid(self, name: str) -> dict[str, list[AnyGpu]]:
        gpus = self._gpus.get(name)
        if gpus is None:
            gpus = self._gpus[name] = {}
            for gpu in self.state.nodes.gpus_of(name):
                gpus.setdefault(gpu.uuid, []).append(gpu)
        return gpus

    def gain(self, victim: RunningJob, job: JobRequest) -> int:
        """``freed_alone`` of ``victim`` for ``job``'s kind (whole GPUs or shares)."""
        gains = self._gains.get(id(victim))
        if gains is None:
            name = victim.node
            node = self._running.get(name)
            gpus = self.state.nodes.gpus_of(name)
            if node is not None and gpus is self.state.views[name].gpus:  # as in the snapshot
                gains = node.gains(gpus).get(id(victim))  # the node's jobs keep the ids apart
                if gains is None:
                    gains = node.gains(gpus)[id(victim)] = freed_alone(
                        victim, self.gpus_by_uuid(name)
                    )
            else:
                gains = freed_alone(victim, self.gpus_by_uuid(name))
            self._gains[id(victim)] = gains
        return gains[1] if job.gpu_memory is not None and job.gpus > 0 else gains[0]

    def bound(self, job: JobRequest, name: str, candidates: Sequence[RunningJob]) -> Cost | None:
        """At most the cost of any victim set among ``candidates`` (victim order) that lets
        ``job`` fit on ``name``; None when none can."""
        need = self.need(job, name)
        best: Cost | None = None
        for victim in candidates:  # the first that suffices alone costs least alone
            if self.gain(victim, job) >= need:
                best = (float(victim.priority), 1, seconds_run(victim, self.now), name)
                break
        multi = self.multi_bound(job, name, candidates)
        if multi is not None and (best is None or multi < best):
            best = multi
        return best

    def multi_bound(
        self, job: JobRequest, name: str, candidates: Sequence[RunningJob]
    ) -> Cost | None:
        """At most the cost of any two or more of ``candidates`` (victim order) that let
        ``job`` fit on ``name``; None when no such set can.

        At least k victims, where k is the fewest whose GPUs could make room
        (``releases_needed``): their top priority is at least the k-th lowest,
        the work they lose at least the k shortest runs.
        """
        if self.state.unique_uuids:  # ``held``, inlined: this runs for every node
            held = sorted([len(v.gpu_uuids) for v in candidates], reverse=True)
        else:
            held = sorted([self.held(v) for v in candidates], reverse=True)
        count = releases_needed(
            usable_bound(job, self.state.fit(name)), [0, *accumulate(held)], job.gpus
        )
        if count is None:
            return None
        count = max(count, 2)
        if count > len(candidates):
            return None
        starts = sorted([v.started_at for v in candidates if v.started_at is not None])
        starts.reverse()  # latest first: shortest run first
        unstarted = len(candidates) - len(starts)
        prefix = list(accumulate(starts[: max(0, count - unstarted)], initial=0.0))
        least = least_lost(self.now, starts[:1], prefix, unstarted, count)
        return (float(candidates[count - 1].priority), count, least, name)

    def multi_bound_at(self, job: JobRequest, name: str) -> Cost | None:
        """``multi_bound(job, name, candidates(job.queue, name))``, from the index's summary
        of the node's candidates while none is taken there."""
        node = self._running.get(name)
        if node is None or name in self.version or not self.state.unique_uuids:
            return self.multi_bound(job, name, self.candidates(job.queue, name))
        found = node.queue(job.queue)
        most, started, prefix, unstarted = found.bounds()
        count = releases_needed(usable_bound(job, self.state.fit(name)), most, job.gpus)
        if count is None:
            return None
        count = max(count, 2)
        candidates = found.candidates
        if count > len(candidates):
            return None
        least = least_lost(self.now, started[:1], prefix, unstarted, count)
        return (float(candidates[count - 1].priority), count, least, name)

    def trial(
        self, job: JobRequest, name: str, candidates: Sequence[RunningJob]
    ) -> tuple[Cost, list[RunningJob]] | None:
        """The victim set the definition chooses on ``name`` (``PostFilter.victims``), with
        its cost; None if none."""
        victims = self._feasibility.victims(job, name, candidates)
        if victims is None:
            return None
        return cost_of(victims, name, self.now), victims


def least_lost(
    now: float, latest: Sequence[float], prefix: Sequence[float], unstarted: int, count: int
) -> float:
    """At most the seconds run by the ``count`` shortest-running of some jobs, at ``now``.

    ``unstarted`` of them have not started (0 s each); ``prefix[k]`` is the
    sum of the k latest start times of the others, ``latest`` the latest (or
    none). ``k * now - prefix[k]``, less a margin for rounding; -inf when a
    job started after ``now`` (its run is shorter than not having started).
    """
    if latest and latest[0] > now:
        return -math.inf
    k = max(0, count - unstarted)
    starts = prefix[k]
    least = k * now - starts - 1e-9 * (1.0 + k * abs(now) + abs(starts))
    return -math.inf if math.isnan(least) else least


class Multis:
    """The nodes in order of ``multi_bound`` for one (queue, GPU count, share), found as read.

    ``at(i)`` is the i-th (bound, node) of the list sorted by bound, or None
    past its end. A node's bound is computed only once it may come next:
    nodes wait in a heap at a cheaper bound, ``(priority of its second
    candidate, 2, -inf, node)`` (a set of two or more costs at least that),
    and an exact bound is handed out once no waiting node can come before
    it. Bounds are computed when first reached, from the candidates left
    then; candidates are only taken away, so they stay lower bounds. The
    search that keeps it is passed in, never kept (no reference cycle: a
    finished cycle is freed by reference counting alone).
    """

    def __init__(self, search: VictimSearch, job: JobRequest) -> None:
        self._job = job
        self._waiting = search.pairs(job.queue)
        heapq.heapify(self._waiting)
        self._known: list[tuple[Cost, str]] = []  # exact bounds not handed out yet
        self._out: list[tuple[Cost, str]] = []  # handed out, in order

    def at(self, search: VictimSearch, i: int, below: float = math.inf) -> tuple[Cost, str] | None:
        """The i-th (bound, node), or None past the end; but when it costs ``below`` or
        more (top priority), possibly only a lower bound of it, itself that dear.
        ``search`` is the one that made it."""
        out, waiting, known = self._out, self._waiting, self._known
        job = self._job
        while len(out) <= i:
            if waiting and (not known or waiting[0][0] < known[0][0]):
                priority = waiting[0][0][0]
                if priority >= below:
                    return waiting[0]  # everything still to come costs at least this
                # An exact bound of this priority is no lower than the waiting ones of it
                # (two victims or more, lost work from -inf), ties of -inf aside: bound all
                # of them at once. Bounding a node early only makes it come up sooner.
                while waiting and waiting[0][0][0] == priority:
                    name = heapq.heappop(waiting)[1]
                    bound = search.multi_bound_at(job, name)
                    if bound is not None:
                        known.append((bound, name))
                heapq.heapify(known)
                continue
            if not known:
                return None
            out.append(heapq.heappop(known))
        return out[i]
