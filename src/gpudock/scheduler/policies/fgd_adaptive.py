"""Score policy and GPU picker: FGD with CPU-limited fragments, priced shares and a learned
workload.

Four extensions of ``fgd.py`` (FGD, Weng et al., ATC'23):

* **CPUs limit how much of a node's GPU capacity a task type can use.** FGD
  counts all of a node's free GPU capacity as fragment for a task type
  whose CPUs the node cannot give even once. ``CpuLimitedFragmentation``
  makes that the limit case of one rule: a node with ``C`` free CPUs holds
  at most ``floor(C / c)`` copies of a type asking ``c`` CPUs, so when that
  is fewer copies than its GPUs could hold, the GPU capacity beyond those
  copies is fragment too (for ``k`` whole GPUs: ``total - k x copies``;
  for a share ``d``: ``total - d x copies``). Where the GPUs are the limit,
  ``F_n(t)`` is FGD's, except that ``k``-GPU types also count the
  ``idle mod k`` idle GPUs they cannot use on nodes that count CPUs. Idle
  GPUs behind nearly exhausted CPUs thus count as fragments *before* the
  CPUs run out, so CPU-heavy jobs (CPU-only ones included) go where CPUs
  are plentiful for the GPUs left.
* **GPUs stranded by CPUs come first.** FGD's ``F_n`` is the capacity the
  *next* task cannot use, so a node whose GPUs most task types already
  cannot use (few CPUs per GPU, or a share-sized gap) looks cheap to fill:
  taking its last CPUs barely raises ``F_n``, although the GPUs left there
  are then lost to every task for good, while a gap left on a node with
  CPUs to spare is usually filled later. ``stranded`` is the free GPU
  capacity the *common* task types (popularity at least ``COMMON``) could
  use by its GPUs but not with the node's free CPUs: the least CPU-limited
  ``F_n(t)`` over them minus the least ``F_n(t)`` with CPUs ignored. It
  counts ``STRANDED_WEIGHT`` times, so in effect nodes are compared by
  stranded capacity first and by FGD's fragments after. Rare types are
  left out because "some type could still use it" is judged by the best
  type: with every type counted, one rare low-CPU type would decide it.
* **The workload is learned** (``WorkloadLearner``): the task types are the
  GPU jobs pending in the cycles seen so far, each job id once, weighted by
  their number (FGD's popularity, from the jobs that have arrived; never from
  jobs yet to come). Until ``MIN_JOBS`` jobs are seen it is
  ``DEFAULT_WORKLOAD``. The measure is rebuilt when the jobs seen have
  doubled or grown by ``REBUILD_EVERY`` since the last build, so that the
  memo of ``F_n`` per node state stays useful. Learning is a pre-score step
  (``LearnWorkload``): once per cycle, before any job is scored, it counts the
  cycle's pending jobs and writes the measure (``LearnedFgd``) into the
  ``CycleState``, where the scorer and the picker read the same one. The
  learner lives in the caller's session (``PluginState``): a learning session
  (the server's controller, the simulator) carries it from cycle to cycle;
  otherwise each cycle learns from its own pending jobs.
* **Shares are placed where they lose least at the workload's cutting-stock
  prices** (``PricedFragmentation``, ``policies/share_price/``). FGD's ``F_n``
  says which free capacity the next task cannot use, not which share should
  have used it: a 0.32 share put behind a 0.47 one leaves 0.21 that almost
  nothing fits, where on an idle GPU it would leave 0.68 for a 0.65 share.
  The cutting-stock LP of the learned share sizes prices each size in GPUs
  (its dual); a GPU with ``f`` free is worth the most that shares fitting in
  ``f`` are priced at, and a placement loses what its GPU's worth falls,
  minus the share's own price. Nodes are compared by stranded capacity,
  then by that loss, then by FGD's fragments (``FRAGMENT_WEIGHT``, a
  tie-break), then best fit. Whole-GPU and CPU-only jobs lose the same worth
  on every node, so for them nothing changes.

Its allocation on the Alibaba 2023 trace (``benchmarks/alibaba_sharing.py``)
is in ``benchmarks/RESULTS.md``; how each extension was chosen, in
``docs/decisions/0004-share-prices.md``.

Caveats, stated plainly:

* a pending job is counted when a cycle first sees it, whether or not it is
  placed then;
* shares are converted to fractions of the largest GPU memory seen (exact
  on clusters of one GPU size);
* ``stranded`` judges each common type alone: where a mix of types could
  use more of a node than any one of them (whole GPUs for one type, a
  half-used GPU for another), the difference counts as stranded too;
* ``COMMON`` (1%) is a popularity threshold fixed in advance, not a
  weight tuned to a trace;
* each rebuild solves the cutting-stock LP (SciPy's HiGHS, by column
  generation, each round adding for every size the best pattern holding it)
  with a knapsack per round; its cost grows with the number of distinct
  sizes, so sizes are priced on a grid of hundredths of a GPU, rounded up
  (``share_price/lp.py``: ``GRID``). Prices are exact for the sizes seen, not for
  sizes yet to come;
* ``FRAGMENT_WEIGHT`` (0.01) only breaks ties between nodes of equal
  stranded capacity and loss.

The measures it builds on live outside it: ``CpuLimitedFragmentation`` in
``scheduler/workload.py``, ``PricedFragmentation`` in
``policies/share_price/fragmentation.py``. Not in the default profile: it
takes the generic (unindexed) path for every job (``docs/decisions/0005-fgd-adaptive-opt-in.md``).
"""

from __future__ import annotations

from collections import Counter
from functools import lru_cache

from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.framework import NodeState, PluginState, Profile, reads
from gpudock.scheduler.policies.fgd import Fgd, FgdPicker
from gpudock.scheduler.policies.share_price.fragmentation import PricedFragmentation
from gpudock.scheduler.policies.share_price.pricing import LargestMemo, largest_memory
from gpudock.scheduler.snapshot import JobRequest, Snapshot
from gpudock.scheduler.workload import DEFAULT_WORKLOAD, MILLI, TaskType

MIN_JOBS = 50
"""GPU jobs seen before the learned workload replaces ``DEFAULT_WORKLOAD``."""
REBUILD_EVERY = 500
"""At most this many new jobs between two rebuilds of the measure."""
SEEN_LIMIT = 1_000_000
"""Job ids remembered (to count each once); forgotten all at once beyond it."""


@lru_cache(maxsize=1)
def _default_measure() -> PricedFragmentation:
    """The ``PricedFragmentation`` of ``DEFAULT_WORKLOAD``, built once (every new learner
    starts with it)."""
    return PricedFragmentation(DEFAULT_WORKLOAD)


class LearnedFgd:
    """A cycle's ``Fgd`` pair on the learned workload: what ``LearnWorkload`` writes into the
    ``CycleState`` and ``AdaptiveFgd`` and ``AdaptiveFgdPicker`` read."""

    __slots__ = ("picker", "scorer")

    def __init__(self, scorer: Fgd, picker: FgdPicker) -> None:
        self.scorer = scorer
        self.picker = picker


class WorkloadLearner:
    """The workload of the GPU jobs seen so far, and the ``Fgd`` pair built on it."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._counts: Counter[tuple[int, int, float]] = Counter()  # (gpus, share bytes, cpus)
        self._gpu_memory = 0  # the largest GPU memory seen, bytes
        self._jobs = 0  # GPU jobs counted
        self._built_at = -1
        self.largest = LargestMemo()  # ``largest_memory`` of the last node tuple
        scorer = Fgd(_default_measure())
        self.learned = LearnedFgd(scorer, FgdPicker(scorer.measure))

    def observe(self, job: JobRequest, gpu_memory: int) -> None:
        """Count ``job`` once (by id) and rebuild the measure when due; idempotent per job.
        ``gpu_memory``: the largest GPU memory of the cluster, bytes (shares are fractions
        of the largest seen)."""
        if job.id in self._seen:
            return
        if len(self._seen) >= SEEN_LIMIT:
            self._seen.clear()
        self._seen.add(job.id)
        if job.gpus == 0:
            return  # CPU-only jobs are not task types (``workload.TaskType``)
        self._gpu_memory = max(self._gpu_memory, gpu_memory)
        self._counts[(job.gpus, job.gpu_memory or 0, job.cpus or 0.0)] += 1
        self._jobs += 1
        if self._jobs >= MIN_JOBS and (
            self._jobs >= 2 * self._built_at or self._jobs - self._built_at >= REBUILD_EVERY
        ):
            self._rebuild()

    def workload(self) -> list[tuple[TaskType, float]]:
        """The task types seen, with their number of jobs (shares as fractions of a GPU)."""
        types: Counter[TaskType] = Counter()
        for (gpus, share, cpus), n in self._counts.items():
            if share:
                fraction = min(share / max(self._gpu_memory, 1), (MILLI - 1) / MILLI)
                types[TaskType(max(round(fraction, 3), 1 / MILLI), cpus)] += n
            else:
                types[TaskType(float(gpus), cpus)] += n
        return [(t, float(n)) for t, n in sorted(types.items(), key=lambda x: (-x[1], str(x[0])))]

    def _rebuild(self) -> None:
        self._built_at = self._jobs
        scorer = Fgd(PricedFragmentation(self.workload()))
        self.learned = LearnedFgd(scorer, FgdPicker(scorer.measure))


class LearnWorkload:
    """Pre-score plugin: learns the workload from each cycle's pending jobs and writes the
    ``LearnedFgd`` pair into the ``CycleState`` (module doc), when a scorer or the picker
    of the profile ``reads`` it."""

    name = "learn_workload"

    def pre_score(
        self, snapshot: Snapshot, profile: Profile, state: CycleState, kept: PluginState
    ) -> None:
        policies = (*(s for s, _ in profile.scorers), profile.picker)
        if not any(LearnedFgd in reads(p) for p in policies):
            return
        learner = kept.get(WorkloadLearner) if kept.learn else WorkloadLearner()
        largest = largest_memory(snapshot.nodes, learner.largest)
        for job in snapshot.pending:
            learner.observe(job, largest)
        state.write(learner.learned)

    def prepare(self, profile: Profile) -> None:
        """Nothing to load ahead."""

    def relevant(self, job: JobRequest) -> bool:
        """GPU jobs are what it learns from."""
        return job.gpus > 0


def _learned(state: CycleState) -> LearnedFgd:
    """The cycle's learned pair; the default workload's when no plugin wrote one."""
    found = state.read(LearnedFgd)
    if found is None:
        scorer = Fgd(_default_measure())
        return LearnedFgd(scorer, FgdPicker(scorer.measure))
    return found


class AdaptiveFgd:
    """``Fgd`` on ``CpuLimitedFragmentation`` of the learned workload (module doc): it scores
    with the cycle's ``LearnedFgd``, and mutates nothing."""

    name = "fgd_adaptive"
    reads: tuple[type, ...] = (LearnedFgd,)

    def score(self, job: JobRequest, node: NodeState, state: CycleState) -> float:
        return _learned(state).scorer.score(job, node, state)


class AdaptiveFgdPicker:
    """Picks the GPUs ``AdaptiveFgd`` scored the node with: the same cycle's ``LearnedFgd``."""

    name = "fgd_adaptive_picker"
    reads: tuple[type, ...] = (LearnedFgd,)

    def pick(self, job: JobRequest, node: NodeState, state: CycleState) -> list[int] | None:
        return _learned(state).picker.pick(job, node, state)
