"""The snapshot's running jobs by node, summarised once and kept from cycle to cycle.

Step 3e (the EASY reservation) reads, per node, when its running jobs end;
step 5 (preemption) reads the preemptible ones in victim order, per node,
and across nodes per queue and GPU count. On a 1,000-node cluster that is
thousands of running jobs to group, filter and sort every cycle, although
few of them change from one cycle to the next.

``RunningIndex`` is that work, done once per snapshot. It keeps the previous
cycle's summary of a node (``NodeRunning``) when the node's running jobs are
the very same objects, in the same order, and the summary still holds at
the new ``now``; only the other nodes are summarised again, and the
cross-node victim streams are patched for them. Snapshots are immutable,
so a summary of the same objects is the one a fresh cycle would make: no
answer depends on what was kept (``tests/unit/scheduler/test_running.py``
replays snapshot sequences both ways). A caller that keeps unchanged
``RunningJob`` objects from one snapshot to the next (the simulator, the
store's ``SnapshotCache``, ``benchmarks/scheduler_scale.py``) skips that
work; fresh objects cost one comparison each.

Only time can change a summary of the same jobs: a job passes its
protected time (``preemption_rules.py``: ``min_runtime``, ``exempt_time``) and
becomes a candidate. Victim order reads start times,
not ``now`` (``victim_order``), and expected ends move with
``now`` only by ``max(now, ...)``, so a summary is checked for exactly
those jobs. A clock that goes backwards rebuilds it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter, is_

from gpudock.scheduler.preemption_rules import DEFAULT_RULES, PreemptionRules
from gpudock.scheduler.snapshot import RunningJob

Stream = list[RunningJob]
Bounds = tuple[list[int], list[float], list[float], int]  # see ``QueueVictims``
Keyed = list[tuple[tuple[int, bool, float, str, int], int, RunningJob]]


def victim_order(victim: RunningJob) -> tuple[int, bool, float, int]:
    """Preference: lowest priority, then youngest (not started yet, then started latest),
    then highest id. Start times, not ``now``: the order of two jobs never changes."""
    started = victim.started_at
    return (
        victim.priority,
        started is not None,
        -started if started is not None else 0.0,
        -victim.id,
    )


def global_order(victim: RunningJob) -> tuple[int, bool, float, str, int]:
    """``victim_order``, then the node: the order of a queue's candidates across nodes."""
    started = victim.started_at
    return (
        victim.priority,
        started is not None,
        -started if started is not None else 0.0,
        victim.node,
        -victim.id,
    )


class QueueVictims:
    """One node's candidates of one queue, with what ``VictimSearch.multi_bound`` reads of
    them (``bounds``, worked out on first use).

    ``most[k]``: the GPUs the k candidates holding the most hold (by their
    uuids); ``unstarted`` how many have not started; ``started`` the start
    times of the others, latest first (shortest run first), and ``prefix[k]``
    the sum of the first k of them.
    """

    __slots__ = ("_bounds", "candidates")

    def __init__(self, candidates: Stream) -> None:
        self.candidates = candidates
        self._bounds: Bounds | None = None

    def bounds(self) -> Bounds:
        """``(most, started, prefix, unstarted)``."""
        found = self._bounds
        if found is None:
            candidates = self.candidates
            held = sorted([len(v.gpu_uuids) for v in candidates], reverse=True)
            started = [v.started_at for v in candidates if v.started_at is not None]
            started.sort(reverse=True)
            found = self._bounds = (
                list(accumulate(held, initial=0)),
                started,
                list(accumulate(started, initial=0.0)),
                len(candidates) - len(started),
            )
        return found


class NodeRunning:
    """The running jobs on one node, and what steps 3e and 5 read of them, summarised on
    first use (a cycle that places everything reads none of it).

    ``first_raw_end``: ``expected_end`` of each job is ``max(now, raw)`` with
    raw ``-inf`` for a stopping job, ``inf`` without ``max_runtime``, else
    its start plus ``max_runtime``; the least raw end gives the node's first
    end at any ``now``. ``ready``: the jobs ``preemptible_now`` at ``now``,
    in victim order; ``latest_start`` the latest start among them.
    ``waiting``: (start, protected time) of the preemptible jobs still protected
    (``rules.protected_for``: ``min_runtime``, ``exempt_time``), the only ones
    time can change.
    """

    __slots__ = (
        "_first_raw_end",
        "_gains",
        "_gains_of",
        "_latest_start",
        "_queues",
        "_ready",
        "_waiting",
        "jobs",
        "now",
        "rules",
    )

    def __init__(
        self, jobs: tuple[RunningJob, ...], now: float, rules: PreemptionRules = DEFAULT_RULES
    ) -> None:
        self.jobs = jobs
        self.now = now
        self.rules = rules
        self._ready: Stream | None = None  # with ``_waiting`` and ``_latest_start``
        self._waiting: list[tuple[float, float]] = []
        self._latest_start = -math.inf
        self._first_raw_end: float | None = None
        self._queues: dict[str, QueueVictims] = {}
        self._gains: dict[int, tuple[int, int]] = {}
        self._gains_of: object = None

    @property
    def ready(self) -> Stream:
        # ``_summarise`` returns it: after that call mypy still narrows ``self._ready``
        # to None, and compiled code (mypyc) checks the narrowed type at run time
        ready = self._ready
        return self._summarise() if ready is None else ready

    @property
    def latest_start(self) -> float:
        if self._ready is None:
            self._summarise()
        return self._latest_start

    @property
    def first_raw_end(self) -> float:
        first = self._first_raw_end
        if first is None:  # ``expected_end`` before any clock: the raw end, inlined
            first = math.inf
            for r in self.jobs:
                if r.stopping:
                    first = -math.inf
                    break
                if r.max_runtime is not None and r.started_at is not None:
                    end = r.started_at + r.max_runtime
                    if end < first:
                        first = end
            self._first_raw_end = first
        return first

    def _summarise(self) -> Stream:
        now = self.now
        ready: Stream = []
        waiting: list[tuple[float, float]] = []
        latest = -math.inf
        protected_for = self.rules.protected_for
        for r in self.jobs:
            if r.stopping or not r.preemptible:
                continue
            started = r.started_at
            least = protected_for(r) if started is not None else None
            if least is not None and started is not None and now - started < least:
                waiting.append((started, least))  # not ``preemptible_now`` yet
                continue
            ready.append(r)
            if started is not None and started > latest:
                latest = started
        if len(ready) > 1:
            ready.sort(key=victim_order)
        self._ready, self._waiting = ready, waiting
        self._latest_start = latest
        return ready

    def holds_at(self, now: float) -> bool:
        """True if this summary is the one a fresh one at ``now`` would be."""
        if now == self.now:
            return True
        if now < self.now or self._ready is None:
            return False  # not summarised: a fresh one at ``now`` costs nothing
        waiting = self._waiting
        return not waiting or all(now - started < least for started, least in waiting)

    def first_end(self, now: float) -> float:
        """The earliest ``expected_end`` of the node's jobs at ``now`` (inf when none);
        ``release.RunningOn.first_end`` inlines it."""
        first = self.first_raw_end
        return first if first > now else now  # ``max(now, first)`` without the call

    def gains(self, gpus: object) -> dict[int, tuple[int, int]]:
        """The memo of ``victims.freed_alone`` of the node's jobs (by ``id``) on ``gpus``,
        the node's GPU tuple of a snapshot: emptied when another tuple is asked for."""
        if gpus is not self._gains_of:
            self._gains, self._gains_of = {}, gpus
        return self._gains

    def queue(self, queue: str) -> QueueVictims:
        """The candidates of ``queue`` (memoized; never mutate them)."""
        found = self._queues.get(queue)
        if found is None:
            found = self._queues[queue] = QueueVictims([v for v in self.ready if v.queue == queue])
        return found


Streams = dict[str, dict[int, Stream]]
Base = tuple["Candidates", set[str]]  # candidates, nodes changed since


class Candidates:
    """Every queue's candidates across nodes: ``keyed`` (sorted, for patching), ``streams``
    by queue and held GPU uuids, ``floor`` (lowest priority) by queue."""

    __slots__ = ("floor", "keyed", "streams")

    def __init__(self, keyed: dict[tuple[str, int], Keyed]) -> None:
        self.keyed = keyed
        self.streams: Streams = {}
        self.floor: dict[str, int] = {}
        for (queue, held), entries in sorted(keyed.items()):
            self.streams.setdefault(queue, {})[held] = [v for _, _, v in entries]
            lowest = entries[0][2].priority
            self.floor[queue] = min(self.floor.get(queue, lowest), lowest)


@dataclass(slots=True)
class RunningMemo:
    """What ``RunningIndex`` keeps for the next cycle of the same caller
    (``SchedulerSession``): the latest index built with this memo."""

    latest: RunningIndex | None = None


class RunningIndex:
    """``snapshot.running`` by node (``holders``, ``nodes``), and the candidates of each
    queue across nodes (``streams``), built from the previous cycle's (``memo.latest``)
    where they hold.

    ``streams[queue][held]``: the candidates of ``queue`` that hold ``held``
    GPU uuids, in victim order then node name; ``floor[queue]`` the lowest
    priority among them; ``latest_start`` the latest start of a candidate.
    While every start is before ``now``, victim order then node is the order
    of one-victim costs (``victims.cost_of``), as ``boards.Board`` reads it.
    They are worked out on first use (step 5 with a blocked job), patched
    from the last ones worked out for the nodes changed since (rebuilt when
    more than three quarters did: a patch filters the kept entries once and
    merges two sorted runs, cheaper than sorting them all again until nearly
    every node changed). ``preempted_for[job]``: the stopping jobs
    preempted for it. ``rules``: the preemption step's (``preemption_rules.py``),
    whose rule 1 decides who is a candidate now. Everything here is read-only to
    its users. Without a ``memo``, or with other rules than its latest index's,
    everything is built anew.
    """

    running: Sequence[RunningJob]
    now: float
    rules: PreemptionRules
    holders: dict[str, Sequence[RunningJob]]
    nodes: dict[str, NodeRunning]
    preempted_for: dict[int, list[RunningJob]]

    def __init__(
        self,
        running: Sequence[RunningJob],
        now: float,
        memo: RunningMemo | None = None,
        rules: PreemptionRules = DEFAULT_RULES,
    ) -> None:
        self.running = running
        self.now = now
        self.rules = rules
        previous = memo.latest if memo is not None else None
        if previous is not None and previous.rules != rules:
            previous = None  # other rules: other candidates
        old = previous.nodes if previous is not None else {}
        if previous is not None and previous.running is running:
            holders = dict(previous.holders)
            self.preempted_for = previous.preempted_for
        else:
            grouped: dict[str, list[RunningJob]] = {}
            preempted_for: dict[int, list[RunningJob]] = {}
            for job in running:
                grouped.setdefault(job.node, []).append(job)
                if job.preempted_for is not None:
                    preempted_for.setdefault(job.preempted_for, []).append(job)
            holders = dict(grouped)
            self.preempted_for = preempted_for
        nodes: dict[str, NodeRunning] = {}
        touched: set[str] = set()
        for name, jobs in holders.items():
            kept = old.get(name)
            if (
                kept is not None
                and (
                    kept.jobs is jobs
                    or (len(kept.jobs) == len(jobs) and all(map(is_, kept.jobs, jobs)))
                )
                and kept.holds_at(now)
            ):
                nodes[name] = kept
                holders[name] = kept.jobs
            else:
                node = nodes[name] = NodeRunning(tuple(jobs), now, rules)
                holders[name] = node.jobs
                touched.add(name)
        touched.update(name for name in old if name not in nodes)
        self.holders = holders
        self.nodes = nodes
        self._candidates: Candidates | None = None
        self._base: Base | None = None  # the latest candidates worked out, for patching
        if previous is not None:
            if previous._candidates is not None:
                self._base = (previous._candidates, touched)
            elif previous._base is not None:
                self._base = (previous._base[0], previous._base[1] | touched)
            if self._base is not None and 4 * len(self._base[1]) > 3 * len(nodes):
                self._base = None  # rebuilt on first use
        if memo is not None:
            memo.latest = self

    @property
    def streams(self) -> Streams:
        return self._worked_out().streams

    @property
    def floor(self) -> dict[str, int]:
        return self._worked_out().floor

    @property
    def latest_start(self) -> float:
        return max([n.latest_start for n in self.nodes.values()], default=-math.inf)

    def _worked_out(self) -> Candidates:
        """The candidates across nodes, from ``_base`` where it holds."""
        found = self._candidates
        if found is not None:
            return found
        base, self._base = self._base, None
        if base is None:
            fresh = [v for node in self.nodes.values() for v in node.ready]
            found = Candidates(_keyed(fresh, {}))
        elif not base[1]:
            found = base[0]
        else:
            names = base[1]
            kept = {
                key: [entry for entry in entries if entry[2].node not in names]
                for key, entries in base[0].keyed.items()
            }
            fresh = [v for name in names if name in self.nodes for v in self.nodes[name].ready]
            found = Candidates(_keyed(fresh, kept))
        self._candidates = found
        return found

    @classmethod
    def of(
        cls,
        running: Sequence[RunningJob],
        now: float,
        memo: RunningMemo | None = None,
        rules: PreemptionRules = DEFAULT_RULES,
    ) -> RunningIndex:
        """The index of ``running`` at ``now`` under ``rules``; the memo's latest again
        when it is the same."""
        recent = memo.latest if memo is not None else None
        if (
            recent is not None
            and recent.running is running
            and recent.now == now
            and recent.rules == rules
        ):
            return recent
        return cls(running, now, memo, rules)


def _keyed(
    fresh: list[RunningJob], kept: dict[tuple[str, int], Keyed]
) -> dict[tuple[str, int], Keyed]:
    """``kept`` (each list sorted) with ``fresh`` candidates merged in, by queue then held."""
    if not kept:
        return _sorted_apart(fresh)
    added: dict[tuple[str, int], Keyed] = {}
    for v in fresh:
        key = (v.queue, len(v.gpu_uuids))
        started = v.started_at  # ``global_order(v)``, inlined: this runs for every candidate
        order = (
            v.priority,
            started is not None,
            -started if started is not None else 0.0,
            v.node,
            -v.id,
        )
        entries = added.get(key)
        if entries is None:
            entries = added[key] = []
        entries.append((order, id(v), v))
    out = dict(kept)
    for key, entries in added.items():
        merged = kept.get(key, []) + entries
        merged.sort()  # two sorted runs, or one: a merge
        out[key] = merged
    return {key: entries for key, entries in out.items() if entries}


_id, _node, _start, _priority = (attrgetter(a) for a in ("id", "node", "started_at", "priority"))


def _sorted_apart(fresh: list[RunningJob]) -> dict[tuple[str, int], Keyed]:
    """``_keyed(fresh, {})``: each (queue, held) group of ``fresh`` in global order.

    The order is reached by stable sorts on one attribute at a time, least
    significant first (id descending, node, start, priority): sorts of ints,
    strings or floats, which cost about a third of one sort of order tuples
    (a cycle with every running job new, e.g. the first after a restart,
    sorts them all). Unstarted jobs come before started ones, these latest
    start first, as ``global_order`` has it. The entries are then built in order.
    """
    groups: dict[tuple[str, int], list[RunningJob]] = {}
    for v in fresh:
        key = (v.queue, len(v.gpu_uuids))
        group = groups.get(key)
        if group is None:
            groups[key] = [v]
        else:
            group.append(v)
    out: dict[tuple[str, int], Keyed] = {}
    for key, group in groups.items():
        group.sort(key=_id, reverse=True)  # stable, as every sort here
        group.sort(key=_node)
        started = [v for v in group if v.started_at is not None]
        started.sort(key=_start, reverse=True)
        ordered = [v for v in group if v.started_at is None] + started
        ordered.sort(key=_priority)
        entries: Keyed = []
        for v in ordered:
            at = v.started_at
            order = (v.priority, at is not None, -at if at is not None else 0.0, v.node, -v.id)
            entries.append((order, id(v), v))
        out[key] = entries
    return out
