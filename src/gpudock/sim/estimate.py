"""Remaining-time ranks from finished jobs, for the ``default`` policy (no oracle).

``RemainingEstimator`` learns, per class of job (its queue and GPU count),
the run times of the jobs that finished, and ranks a job that has already
run ``a`` seconds by its **Gittins index** over that empirical distribution
``D`` (Gittins; Aalto, Ayesta & Righter 2009). The index is the best rate at
which serving the job for some further quantum ``Δ`` completes it::

    G(a) = sup_Δ  P(D - a <= Δ | D > a) / E[min(D - a, Δ) | D > a]

Serving the job of highest index first minimises mean response time among
policies that know the distribution of sizes but not the sizes themselves.
``remaining`` returns ``1 / G(a)`` in seconds, an *effective remaining time*
(smaller runs first), so the policies' remaining-time priorities apply
unchanged. It is never more than the expected remaining time
``E[D - a | D > a]`` (the quantum ``Δ = ∞``), and much less for a new job of
a heavy-tailed class: most such jobs are short, and the conditional mean,
dominated by the few long ones, would rank them behind jobs that are
already known to be long. With ``rule="mean"`` the estimator returns that
conditional mean instead.

Resolution: durations fall into log bins of ``PRIORITY_STEPS`` per factor e
(about 1% wide: the resolution of the policies' priorities). Counts and sums
per bin live in Fenwick trees, so ``record`` and the conditional mean take
O(log bins); the mean is exact (the bin holding ``a`` is split by value).
The Gittins index is taken at the lower edge of the bin holding ``a`` (ages
are rounded down by under 1%), over quanta that end at the longest run of a
bin (one ending inside a bin stops under 1% of its end sooner), so a rank is
never below the exact one and, for a quantum that starts well before it ends,
at most about 1% above it. A build keeps the points of the curve
``(E[min(D, t)], P(D <= t))`` at those quantum ends (one per bin that holds a
run), whose slopes from the point at ``a`` are the ratios above; the index
at a bin's edge is the steepest such slope, worked out (a walk along the
upper convex hull of the later points) on the bin's first look-up and kept,
as a replay reads only a few bins of each build. A history is built again once
it has grown by ``sqrt(n)`` finishes since the last build: ``k`` new
finishes move the empirical CDF by at most ``k / n``, below its sampling
error ``1 / sqrt(n)``. ``version`` tells when a class's ranks may have moved
(a rebuild is due, a longer run finished, a class starts to count), so a job
whose attained time stands still (pending) need not be ranked again before.

Classes with too little history fall back to the history of all jobs of
that GPU count, then to all jobs; with no history at all the estimate is
the attained time itself (least attained service). Only finished jobs are
read: the estimator never sees a job's true duration before it ends.

**Whole-node jobs.** Given ``whole_node`` (the GPUs of the cluster's largest
node; the simulator passes it), a job of at least that many GPUs is ranked
from its queue's finished jobs of every GPU count, then all jobs', rather
than from its size class. Its own class, long-running as whole-node jobs
are, ranks it behind the queue's smaller jobs of the same age, so it is the
lowest-ranked running job and the first victim; and once preempted it
restarts only when a whole node drains, which no rank counts. Ranked with
its queue, it competes with the queue's other jobs by age, as under least
attained service, while every smaller job keeps its class's index.

**Close siblings.** Jobs that one user submits together run alike: in the
Philly window the log run times of consecutive jobs of one queue and GPU
count submitted within 120 s of each other are strongly correlated. A finished
job recorded with its submit time becomes the *close sibling* of the jobs of
its queue and exact GPU count submitted within ``SIBLING_GAP`` seconds of it
(``sibling``: the nearest one). Each finish that had a close sibling adds its
run time over the sibling's to a second set of histories (GPU bucket and
all jobs), the *ratios* ``R``; a job whose sibling ran ``s`` seconds is ranked as
one of run time ``s R``: ``1 / G_sR(a) = s / G_R(a / s)``, from the same
Gittins builds (ratios are kept times ``RATIO_UNIT``, so their 1% bins are
those of run times). Until ``min_history`` ratios exist, or past the longest
one, the job is ranked as if it had no sibling.
"""

from __future__ import annotations

import bisect
import math
from typing import Literal

from gpudock.sim.policies import PRIORITY_STEPS

MIN_HISTORY = 20  # finished jobs a class needs before its own history is used
SIBLING_GAP = 10.0  # seconds: jobs of one class submitted this close are close siblings
RATIO_UNIT = 1000.0  # a run time equal to its sibling's is a ratio of 1000 (1% bins apply)
_BINS = int(PRIORITY_STEPS * math.log1p(1e9)) + 1  # durations past ~30 years share the last bin

Rule = Literal["gittins", "mean"]


def gpu_bucket(gpus: float) -> int:
    """1, 2, 4, 8, 16+ GPUs: classes that behave alike."""
    for bound in (1, 2, 4, 8):
        if gpus <= bound:
            return bound
    return 16


_TINY = 1e-9  # job-seconds: a later point is never closer than this (rounding guard)
_EDGES = [math.expm1(b / PRIORITY_STEPS) for b in range(_BINS)]  # lower edge of each bin
_UPPER = [*_EDGES[1:], math.inf]  # upper edge of each bin (the last one has none)


def _bin(seconds: float) -> int:
    return min(_BINS - 1, int(PRIORITY_STEPS * math.log1p(max(0.0, seconds))))


class _Fenwick:
    """Prefix sums over ``size`` slots: ``add`` and ``prefix`` in O(log size)."""

    __slots__ = ("_tree",)

    def __init__(self, size: int) -> None:
        self._tree = [0.0] * (size + 1)

    def add(self, index: int, value: float) -> None:
        tree, i = self._tree, index + 1
        while i < len(tree):
            tree[i] += value
            i += i & -i

    def prefix(self, index: int) -> float:
        """Sum of slots ``0 .. index - 1``."""
        tree, i, total = self._tree, index, 0.0
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total


class _History:
    """The finished run times of one class: binned counts, sums and longest runs.

    ``exact``: also keep what the exact conditional mean reads (prefix sums
    and each bin's run times); only ``expected_remaining`` needs them.
    """

    def __init__(self, exact: bool = True) -> None:
        self.exact = exact
        self.count = 0
        self.total = 0.0
        self.longest = 0.0
        self._counts = _Fenwick(_BINS)
        self._sums = _Fenwick(_BINS)
        self._values: dict[int, dict[float, int]] = {}  # bin -> duration -> finishes
        # for the Gittins builds, one entry per bin that holds a run, by bin: the bin,
        # its finishes, their seconds and its longest run (lists a build reads in order)
        self._bins: list[int] = []
        self._bin_counts: list[int] = []
        self._bin_sums: list[float] = []
        self._bin_longest: list[float] = []
        self._curve: _Curve | None = None  # the last build; None: rebuilt at the next look-up
        self._built_at = 0  # count when the curve was built
        self.version = 0  # changes whenever a Gittins rank read from here may change

    def add(self, duration: float) -> None:
        """Record a finish; bumps ``version`` when the build goes stale or the longest
        run grows (a rank that fell back past the longest run may now come from here)."""
        if not duration > 0.0:  # ``max(0.0, duration)``, and the ``max``es below, no calls
            duration = 0.0
        if duration > self.longest:
            self.version += 1
        if self._curve is not None and (self.count + 1 - self._built_at) ** 2 >= self._built_at:
            self._curve = None  # stale: misses enough finishes to be rebuilt
            self.version += 1
        b = _bin(duration)
        if self.exact:
            self._counts.add(b, 1.0)
            self._sums.add(b, duration)
            values = self._values.setdefault(b, {})
            values[duration] = values.get(duration, 0) + 1
        bins = self._bins
        at = bisect.bisect_left(bins, b)
        if at < len(bins) and bins[at] == b:
            self._bin_counts[at] += 1
            self._bin_sums[at] += duration
            if duration > self._bin_longest[at]:
                self._bin_longest[at] = duration
        else:
            bins.insert(at, b)
            self._bin_counts.insert(at, 1)
            self._bin_sums.insert(at, duration)
            self._bin_longest.insert(at, duration)
        self.count += 1
        self.total += duration
        if duration > self.longest:
            self.longest = duration

    def expected_remaining(self, attained: float) -> float | None:
        """``E[D - a | D > a]``, exact; None when no recorded run outlasted ``attained``.
        Needs ``exact``."""
        assert self.exact, "the conditional mean needs a history kept with exact=True"
        if attained >= self.longest:
            return None
        b = _bin(attained)
        count = self.count - self._counts.prefix(b + 1)
        total = self.total - self._sums.prefix(b + 1)
        for value, n in self._values.get(b, {}).items():  # the bin holding a, split exactly
            if value > attained:
                count += n
                total += n * value
        return total / count - attained

    def gittins_remaining(self, attained: float) -> float | None:
        """``1 / G(a)`` (module doc); None when no recorded run outlasted ``attained``."""
        ranked = self.gittins_ranked(attained)
        return None if ranked is None else ranked[0]

    def gittins_ranked(self, attained: float) -> tuple[float, float] | None:
        """``(1 / G(a), until)``: the rank holds for every age from ``attained`` up to
        ``until`` (its bin's upper edge, or the longest run) while ``version`` stands."""
        if attained >= self.longest:
            return None
        curve = self._curve
        if curve is None:
            curve = self._curve = _Curve(self._bin_counts, self._bin_sums, self._bin_longest)
            self._built_at = self.count
        # ``_bin``, inlined without ``min`` and ``max`` calls: this runs for every look-up
        b = int(PRIORITY_STEPS * math.log1p(attained if attained > 0.0 else 0.0))
        if b >= _BINS:
            b = _BINS - 1
        rank = curve._ranks.get(b)  # ``curve.rank``'s memo, read here: most look-ups hit it
        if rank is None:
            rank = curve.rank(b)
        if not math.isfinite(rank):
            return None
        upper = _UPPER[b]
        return rank, (upper if upper < self.longest else self.longest)


class _Curve:
    """The points ``(n E[min(D, t)], n P(D <= t))`` of one build, and ``1 / G`` at the
    lower edge of a bin, worked out on the bin's first look-up.

    Quanta end at the longest run of a bin (the end that completes the whole
    bin; one inside it is at most 1% shorter). ``G`` at age ``a`` is the
    steepest slope from ``a``'s point to a later one (a quantum ending after
    ``a``). Every later point lies to the right of ``a``'s, so the steepest
    slope is to a vertex of the upper convex hull of the points from the first
    later one on, and along that hull the slopes from ``a``'s point rise to
    it and then fall: a look-up walks the hull from its first vertex until a
    slope falls (usually one to three steps where a scan of every later point
    took up to a thousand). The hulls of every suffix of the points share
    their tails, so one array holds them all (``_next``, built on a build's
    first look-up in one pass from the right, as a monotone chain does). A
    replay reads a few bins of each build (new jobs at age 0, running ones at
    theirs). The points and the running totals are summed from the right, in
    one order, so every look-up of a build computes the same floats.
    """

    __slots__ = ("_done", "_ends", "_n", "_next", "_ranks", "_work", "_xs", "_ys")

    def __init__(self, counts: list[int], sums: list[float], longest: list[float]) -> None:
        """From the finishes, their seconds and the longest run of each bin that holds a
        run, in bin order (``_History``'s lists, read here and not kept)."""
        m = len(counts)
        n = float(sum(counts))
        # ``float``: mypy types ``sum`` of floats as ``float | int``, which compiled code
        # would keep boxed through the loop below (the same value either way)
        done, work = n, float(sum(sums))  # finishes, and their seconds, before the age
        self._n = n
        self._ends = ends = longest.copy()
        xs, ys = [0.0] * m, [0.0] * m
        # ``_done[k]``, ``_work[k]``: those of the bins before the k-th, the finishes by
        # an age whose first later quantum end is ``ends[k]``
        self._done, self._work = [0.0] * m, [0.0] * m
        for k in range(m - 1, -1, -1):
            xs[k], ys[k] = work + (n - done) * ends[k], done  # the quantum to it
            done, work = done - counts[k], work - sums[k]
            self._done[k], self._work[k] = done, work
        self._xs, self._ys = xs, ys
        self._next: list[int] | None = None  # see ``_hulls``
        self._ranks: dict[int, float] = {}  # bin -> 1 / G(its lower edge)

    def _hulls(self) -> list[int]:
        """``next[k]``: the vertex after point ``k`` on the upper convex hull of the points
        from ``k`` on (-1 for the last point), so that hull is ``k, next[k],
        next[next[k]], ...``. A point on or below the line between its neighbours on
        the hull is left out (it is never the only steepest one)."""
        xs, ys = self._xs, self._ys
        m = len(xs)
        following = [-1] * m
        top = -1  # the first vertex of the hull of the points after ``k``
        for k in range(m - 1, -1, -1):
            x, y = xs[k], ys[k]
            while top >= 0:
                after = following[top]
                if after < 0:
                    break
                # ``top`` stays only strictly above the line from ``k`` to ``after``
                if (xs[top] - x) * (ys[after] - y) - (ys[top] - y) * (xs[after] - x) < 0:
                    break
                top = after
            following[k] = top
            top = k
        self._next = following
        return following

    def rank(self, b: int) -> float:
        """``1 / G`` at the lower edge of bin ``b``; inf when no run outlasts it.
        ``_History.gittins_ranked`` reads the memo (``_ranks``) itself first."""
        found = self._ranks.get(b)
        if found is None:
            edge, ends = _EDGES[b], self._ends
            k = bisect.bisect_right(ends, edge)  # the first quantum ending after it
            if k == len(ends):
                found = math.inf
            else:
                following = self._next
                if following is None:
                    following = self._hulls()
                done = self._done[k]
                x = self._work[k] + (self._n - done) * edge
                xs, ys = self._xs, self._ys
                run = xs[k] - x
                steepest = (ys[k] - done) / (run if run >= _TINY else _TINY)
                j = following[k]
                while j >= 0:  # along the hull while the slope does not fall
                    run = xs[j] - x
                    slope = (ys[j] - done) / (run if run >= _TINY else _TINY)
                    if slope < steepest:
                        break
                    steepest, j = slope, following[j]
                found = 1.0 / steepest
            self._ranks[b] = found
        return found


class _Histories:
    """One kind of history at up to three levels: per class (queue, GPU bucket) unless
    ``per_class`` is false, per GPU bucket, and over all jobs; a class reads them in
    that order (``chain``). With ``per_class`` and a finite ``whole_node`` (the GPUs of
    the largest node) there is a fourth kind, per queue (all its jobs, whatever their
    GPU count): a job of at least ``whole_node`` GPUs reads that one, then all jobs',
    instead (``RemainingEstimator``)."""

    def __init__(self, exact: bool, per_class: bool = True, whole_node: float = math.inf) -> None:
        self._exact = exact
        self._per_class = per_class
        self._whole_node = whole_node if per_class else math.inf
        self._by_class: dict[tuple[str, int], _History] = {}
        self._by_gpus: dict[int, _History] = {}
        self._by_queue: dict[str, _History] = {}  # whole-node jobs read these
        self.all = _History(exact=exact)
        self._chains: dict[tuple[str, float], tuple[_History, ...]] = {}  # see ``chain``

    def levels(self, queue: str, gpus: float) -> tuple[_History, ...]:
        """The histories a value of this class goes into (made when first needed)."""
        bucket = gpu_bucket(gpus)
        by_gpus = self._by_gpus.get(bucket)
        if by_gpus is None:
            by_gpus = self._by_gpus[bucket] = _History(exact=self._exact)
            self._chains.clear()
        if not self._per_class:
            return by_gpus, self.all
        by_class = self._by_class.get((queue, bucket))
        if by_class is None:
            by_class = self._by_class[queue, bucket] = _History(exact=self._exact)
            self._chains.clear()
        if self._whole_node == math.inf:
            return by_class, by_gpus, self.all
        by_queue = self._by_queue.get(queue)
        if by_queue is None:
            by_queue = self._by_queue[queue] = _History(exact=self._exact)
            self._chains.clear()
        return by_class, by_gpus, self.all, by_queue

    def chain(self, queue: str, gpus: float) -> tuple[_History, ...]:
        """The histories a job of this class reads, in order: its class's, its GPU
        bucket's, all jobs' (those that exist; kept until a history is added). A job of
        at least ``whole_node`` GPUs reads its queue's, then all jobs'."""
        chain = self._chains.get((queue, gpus))  # ``RemainingEstimator.ranked`` reads it too
        if chain is None:
            if gpus >= self._whole_node:
                found: tuple[_History | None, ...] = (self._by_queue.get(queue), self.all)
            else:
                bucket = gpu_bucket(gpus)
                found = (self._by_class.get((queue, bucket)), self._by_gpus.get(bucket), self.all)
            chain = self._chains[queue, gpus] = tuple(h for h in found if h is not None)
        return chain


class RemainingEstimator:
    """Effective remaining run time of a job, from finished jobs only (module doc)."""

    def __init__(
        self, min_history: int = MIN_HISTORY, rule: Rule = "gittins", whole_node: float = math.inf
    ) -> None:
        """``whole_node``: the GPUs of the cluster's largest node. A job of at least that
        many GPUs (it holds whole nodes) is ranked from its queue's finished jobs of every
        GPU count, then all jobs', rather than from its size class (module doc)."""
        self._min = min_history
        self._rule = rule
        self._runs = _Histories(exact=rule == "mean", whole_node=whole_node)
        self._ratios = _Histories(exact=False, per_class=False)  # see ``record``
        self._finished: dict[tuple[str, float], tuple[list[float], list[float]]] = {}
        self.changes = 0  # moves whenever any class's ``version`` does

    def record(
        self, queue: str, gpus: float, duration: float, submitted: float | None = None
    ) -> None:
        """A job of ``queue`` using ``gpus`` GPUs finished after running ``duration``
        seconds. With ``submitted`` (its submit time) it also becomes a sibling that later
        ranks read (``sibling``), and its run time over its own close sibling's (times
        ``RATIO_UNIT``), if it had one, joins the ratios that siblings' ranks are scaled
        by: those of its GPU bucket and those of all jobs (how alike the run times of
        close siblings are is learnt per GPU bucket, not per queue)."""
        if submitted is not None:
            sibling = self.sibling(queue, gpus, submitted)
            if sibling is not None:
                ratio = RATIO_UNIT * max(duration, 1.0) / max(sibling, 1.0)
                self._add(self._ratios.levels(queue, gpus), ratio)
            submits, durations = self._finished.setdefault((queue, gpus), ([], []))
            at = bisect.bisect_right(submits, submitted)
            submits.insert(at, submitted)
            durations.insert(at, duration)
        self._add(self._runs.levels(queue, gpus), duration)

    def _add(self, histories: tuple[_History, ...], value: float) -> None:
        for history in histories:
            before = history.version
            history.add(value)
            if self._rule == "mean" or history.count == self._min:
                history.version += 1  # every finish moves the mean; a class starts to count
            if history.version != before:
                self.changes += 1

    def sibling(self, queue: str, gpus: float, submitted: float) -> float | None:
        """The run time of this job's *close sibling*: the finished job of the same queue
        and GPU count (exactly) submitted nearest to ``submitted``, at most
        ``SIBLING_GAP`` seconds away (the earlier one of two as near); None if none is.
        Only jobs recorded with their submit time count."""
        found = self._finished.get((queue, gpus))
        if found is None:
            return None
        submits, durations = found
        at = bisect.bisect_left(submits, submitted)
        best: float | None = None
        gap = SIBLING_GAP
        for i in (at - 1, at):  # the nearest on each side (the later one only if nearer)
            if not 0 <= i < len(submits):
                continue
            distance = abs(submits[i] - submitted)
            if distance < gap or (best is None and distance == gap):
                best, gap = durations[i], distance
        return best

    def version(self, queue: str, gpus: float) -> int:
        """A number that changes whenever ``remaining`` for this class may change at a
        fixed ``attained`` and a fixed sibling (so a pending job's rank need not be
        recomputed until then, or until its sibling changes)."""
        runs = sum([history.version for history in self._runs.chain(queue, gpus)])
        return runs + sum([history.version for history in self._ratios.chain(queue, gpus)])

    def remaining(
        self, queue: str, gpus: float, attained: float, sibling: float | None = None
    ) -> float:
        """Effective seconds left for a job that has run ``attained`` seconds (module doc)."""
        return self.ranked(queue, gpus, attained, sibling)[0]

    def ranked(
        self, queue: str, gpus: float, attained: float, sibling: float | None = None
    ) -> tuple[float, float]:
        """``(remaining(queue, gpus, attained, sibling), until)``: the same value holds for
        every attained time from ``attained`` up to (not including) ``until``, as long as
        ``version(queue, gpus)`` (and the sibling) do not change.

        ``sibling``: the run time of the job's close sibling (``sibling``). The job's
        run time is then taken as ``s R`` with ``s = sibling / RATIO_UNIT`` and ``R``
        the learnt ratios (its GPU bucket's, else all jobs'), and ranked
        ``1 / G_sR(a) = s / G_R(a / s)``; without enough ratios (or past the longest
        one) as if it had none. The ``mean`` rule reads no siblings."""
        if sibling is not None and self._rule == "gittins":
            scale = max(sibling, 1.0) / RATIO_UNIT
            ratios = self._ratios
            for history in ratios._chains.get((queue, gpus)) or ratios.chain(queue, gpus):
                if history.count >= self._min:
                    ranked = history.gittins_ranked(attained / scale)
                    if ranked is not None:
                        return ranked[0] * scale, ranked[1] * scale
        runs = self._runs  # its ``chain``'s memo read here: this runs for every look-up
        for history in runs._chains.get((queue, gpus)) or runs.chain(queue, gpus):
            if history.count < self._min:
                continue
            if self._rule == "mean":
                mean = history.expected_remaining(attained)
                if mean is not None:
                    return mean, attained  # exact: it moves with every second
            else:
                ranked = history.gittins_ranked(attained)
                if ranked is not None:
                    return ranked
        return max(attained, 1.0), attained  # nothing known: least attained service
