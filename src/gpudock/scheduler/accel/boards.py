"""Step 5's priority kind: one best-first search per request shape (``Board``).

A ``Board`` finds the cheapest victim set over all nodes for one
(placement key, queue) and keeps it current as victims are taken; every
blocked job with that key asks it (``victims.py`` explains why a job's
priority only decides whether it may take that set). Sources, cheapest
first: the queue's candidates that may suffice alone, by their one-victim
cost; the nodes by their bound for two victims or more; and a heap of
nodes tried (exact cost) or changed since (a bound).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping

from gpudock.scheduler.accel.victims import Multis, VictimSearch
from gpudock.scheduler.framework import PlacementKey, placement_key
from gpudock.scheduler.snapshot import JobRequest, RunningJob
from gpudock.scheduler.victim_sets import Cost, VictimSet, seconds_run


class Boards:
    """Step 5's ``VictimFinder`` (``preemption.py``) over one ``VictimSearch``: the priority
    kind from one ``Board`` per (key, queue), the reclaim kind from the search itself.

    Boards point at the search, never the other way round, so that a
    finished cycle is freed by reference counting alone.
    """

    def __init__(self, search: VictimSearch) -> None:
        self._search = search
        self._boards: dict[tuple[PlacementKey, str], Board] = {}

    @property
    def floor(self) -> Mapping[str, int]:
        """Per queue, the lowest priority of a candidate (``VictimSearch.floor``)."""
        return self._search.floor

    def any_rule(self, job: JobRequest, eligible: Callable[[RunningJob], bool]) -> VictimSet | None:
        """The reclaim kind (``VictimSearch.any_rule``)."""
        return self._search.any_rule(job, eligible)

    def take(self, choice: VictimSet) -> None:
        """No later answer holds the victims of ``choice`` (``VictimSearch.take``)."""
        self._search.take(choice)

    def choose(self, job: JobRequest) -> VictimSet | None:
        """``choose_victims`` with victims of ``job``'s queue of lower priority, not yet taken."""
        key = (placement_key(job), job.queue)
        board = self._boards.get(key)
        if board is None:
            board = self._boards[key] = Board(self._search, job)
        if job.priority <= board.refused:
            return None  # refused a job of this key as high already (see ``Board.refused``)
        best = board.best(below=job.priority)
        if best is None or best[0][0] >= job.priority:
            board.refused = max(board.refused, job.priority)
            return None
        return VictimSet(best[0][3], tuple(sorted(best[1], key=lambda v: v.id)))


class Board:
    """The cheapest victim set over all nodes for one (placement key, queue), kept current.

    A best-first search over three sources, cheapest first: the queue's
    candidates that may suffice alone, in order of their one-victim cost
    (``VictimSearch.singles``: only those holding enough GPUs); the nodes by
    their bound for two victims or more (``VictimSearch.multis``: computed
    only as far as the search reads them); and ``_heap``: tried nodes at
    their exact cost, changed ones at a bound, each entry with the node's
    version when pushed. A node
    is tried when one of its bounds comes up; every node not tried has its
    bounds still to come, so an exact, current entry cheaper than anything
    still to come is the cheapest of all.
    """

    def __init__(self, search: VictimSearch, job: JobRequest) -> None:
        self._search = search
        self._job = job  # any job with this key and queue
        least = job.gpus - search.most_usable(job)  # what a victim must free alone, at least
        singles = search.singles.get(job.queue, {})
        self._streams = [stream for held, stream in singles.items() if held >= least]
        self._held = [held for held in singles if held >= least]  # each stream's
        self._heads = [(self._cost(s[0]), i, 0) for i, s in enumerate(self._streams)]
        heapq.heapify(self._heads)  # (one-victim cost, stream, position) of each stream's next
        floor = search.floor.get(job.queue)
        self._multis: Multis | None = None  # asked for when first needed
        self._before_multis: Cost | None = None
        if floor is not None:
            self._before_multis = (float(floor), 2, -math.inf, "")  # below every multi bound
        self._next_multi = 0
        self._heap: list[tuple[Cost, bool, int, str]] = []  # (cost or bound, bound?, version, node)
        self._found: dict[str, tuple[int, list[RunningJob] | None]] = {}  # node -> (version, set)
        self._need: dict[str, int] = {}  # node -> ``VictimSearch.need``
        self._log = len(search.log)
        # The highest priority refused so far: taking victims only removes candidates
        # and capacity does not change in step 5, so the cheapest set only gets dearer
        # and every job of this key and queue with a priority as low is refused too.
        self.refused: float = -math.inf

    def best(self, below: float = math.inf) -> tuple[Cost, list[RunningJob]] | None:
        """The cheapest victim set and its cost, or None when no node has one.

        Also None, early, once everything still to come costs ``below`` or more
        (top victim priority): no set could be taken by a job of that priority.
        The search keeps its place, so a later call goes on from there.
        """
        self._catch_up()
        heap, heads, version = self._heap, self._heads, self._search.version
        while True:
            multi = self._multi_ahead(below)
            single = heads[0][0] if heads else None
            # a flag, not ``ahead is single``: compiled (mypyc), a Cost tuple is unboxed
            # and boxed anew, so identity does not survive
            from_single = multi is None or (single is not None and single < multi)
            ahead = single if from_single else multi
            top = heap[0][0] if heap else None
            least = ahead if top is None or (ahead is not None and ahead < top) else top
            if least is not None and least[0] >= below:
                return None
            if ahead is not None and (not heap or ahead < heap[0][0]):
                if from_single:
                    _, i, at = heapq.heappop(heads)
                    stream = self._streams[i]
                    if at + 1 < len(stream):
                        heapq.heappush(heads, (self._cost(stream[at + 1]), i, at + 1))
                    self._look(stream[at], self._held[i])
                elif self._multis is None:
                    self._multis = self._search.multis(self._job)
                else:
                    entry = self._multis.at(self._search, self._next_multi)
                    assert entry is not None  # it came ahead
                    self._try(entry[1])
                    self._next_multi += 1
                continue
            if not heap:
                return None
            cost, bound, seen, name = heap[0]
            if not bound and seen == version.get(name, 0):
                found = self._found[name][1]
                assert found is not None
                return cost, found
            heapq.heappop(heap)
            self._try(name)

    def _cost(self, victim: RunningJob) -> Cost:
        """Its one-victim cost."""
        return (float(victim.priority), 1, seconds_run(victim, self._search.now), victim.node)

    def _multi_ahead(self, below: float) -> Cost | None:
        """The next multi bound to come (before they are built: one below all of them);
        only a lower bound of it if that costs ``below`` or more (``Multis.at``)."""
        if self._multis is None:
            return self._before_multis
        entry = self._multis.at(self._search, self._next_multi, below)
        return None if entry is None else entry[0]

    def _look(self, victim: RunningJob, held: int) -> None:
        """A candidate that may suffice alone: its node is tried if it does. ``held``: what
        it could free alone at most (its stream's), so fewer than its node needs rules it out
        without working out what it frees."""
        search, name, job = self._search, victim.node, self._job
        if victim.id in search.taken or name in self._found:
            return
        need = self._need.get(name)
        if need is None:
            if not search.could_fit(job, name):
                self._found[name] = (-1, None)  # never tried
                return
            need = self._need[name] = search.need(job, name)
        if held >= need and search.gain(victim, job) >= need:
            self._try(name)

    def _catch_up(self) -> None:
        """Nodes tried already that lost candidates since the last call: again, later."""
        search = self._search
        for name in search.log[self._log :]:
            found = self._found.get(name)
            if found is not None and found[0] != -1:
                bound = search.bound(self._job, name, search.candidates(self._job.queue, name))
                if bound is not None:
                    heapq.heappush(self._heap, (bound, True, -1, name))
        self._log = len(search.log)

    def _try(self, name: str) -> None:
        """Find the node's victim set now (once per version) and push it at its exact cost."""
        search = self._search
        version = search.version.get(name, 0)
        done = self._found.get(name)
        if done is not None and done[0] in (version, -1):
            return
        if name not in self._need and not search.could_fit(self._job, name):  # ``_look``'s
            self._found[name] = (-1, None)
            return
        candidates = search.candidates(self._job.queue, name)
        found = search.trial(self._job, name, candidates) if candidates else None
        self._found[name] = (version, None if found is None else found[1])
        if found is not None:
            heapq.heappush(self._heap, (found[0], False, version, name))
