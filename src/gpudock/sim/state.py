"""A replay's state and its setup: the cluster's views, the jobs, the queues and the
scheduler profile a run drives (``SimState``), and how the cluster's views and the
usage series change as jobs take and free GPUs.

The first class of the simulator's chain: ``SimState`` → ``DynamicPriorities``
(``priorities.py``) → ``JobTransitions`` (``transitions.py``) → ``Simulator``
(``engine.py``). One class split along the flow, not a hierarchy of kinds: tests
subclass ``Simulator`` and override any of these methods.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import replace

from mypy_extensions import mypyc_attr

from gpudock.core.affinity import parse_selector
from gpudock.queue.config import QueuesConfig
from gpudock.queue.history import UsageHistory
from gpudock.scheduler.admission import QueuePolicy
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import (
    GpuView,
    JobRequest,
    NodeView,
    Placement,
    RunningJob,
)
from gpudock.sim.cluster import ClusterSpec
from gpudock.sim.estimate import RemainingEstimator
from gpudock.sim.jobs import (
    ProgressFn,
    SimConfig,
    _Job,
    _label,
    _largest_remainder,
    _running_view,
    _shuffle_ties,
    _with_gpus,
)
from gpudock.sim.policies import PARTITION_LABEL, SimPolicy
from gpudock.sim.results import JobRecord, RunRecord
from gpudock.sim.traces import TraceJob, as_gang


@mypyc_attr(allow_interpreted_subclasses=True)  # tests subclass ``Simulator``
class SimState:
    """A replay's state (module doc); ``Simulator`` runs it."""

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        cluster: ClusterSpec,
        policy: SimPolicy,
        config: SimConfig | None = None,
        progress: ProgressFn | None = None,
    ) -> None:
        self.policy = policy
        self._report = progress  # called every ``PROGRESS_EVERY`` s of wall time, and at the end
        self._finished = 0
        self.config = config or SimConfig()
        self.cluster = cluster
        views = cluster.node_views()
        gpus_per_node = max((len(v.gpus) for v in views), default=1) or 1
        memory = {v.name: v.gpus[0].memory_total for v in views if v.gpus}
        self._gpu_memory = max(memory.values(), default=0)
        self._partition: dict[str, str] = {}
        if policy.partition:
            views = self._partitioned(views, jobs)
        self._nodes: dict[str, NodeView] = {v.name: v for v in views}
        self._gpus: dict[str, list[GpuView]] = {v.name: list(v.gpus) for v in views}
        self._uuid_index = {g.uuid: (v.name, g.index) for v in views for g in v.gpus}
        self._flips: dict[tuple[int, int], tuple[GpuView, GpuView]] = {}  # see ``_change``
        self._states: dict[GpuView, GpuView] = {}  # ... one view per state of a whole GPU
        self.total_gpus = float(sum(len(v.gpus) for v in views))
        self._jobs: list[_Job] = []
        if self.config.seed:
            jobs = _shuffle_ties(jobs, self.config.seed)
        config = self.config
        for number, trace in enumerate(jobs, start=1):
            trace = as_gang(trace, gpus_per_node)
            job = _Job(trace, self._request(number, trace), trace.duration)
            job.priority, job.klass = job.request.priority, (trace.queue, job.gpus)
            job.overhead = config.restart_overhead
            if trace.restart_overhead is not None:
                job.overhead = trace.restart_overhead
            job.restart_cost = config.preempt_grace + job.overhead
            job.checkpoint = trace.checkpoint_interval or config.checkpoint_interval
            self._jobs.append(job)
        self._of_class: dict[tuple[str, float], list[int]] = {}  # siblings: numbers by class
        self._swept: dict[int, _Job] = {}  # siblings: active jobs whose job before them
        # (``before``) is active too, by number, in arrival order
        self._queues = self._queue_policy(jobs)
        self._history: UsageHistory | None = None
        if self._queues is not None:
            self._history = UsageHistory(half_life=self._queues.config.fair_share.half_life)
        self._tick_at = math.inf
        # this run's cycles reuse each other's work, and plugins learn across them, as live
        self._session = SchedulerSession(learn=True)
        profile = policy.profile(lambda job_id: self._jobs[job_id - 1].trace.duration)
        self._profile = replace(  # a plugin with nothing to compute for any job: no call per cycle
            profile,
            pre_scorers=tuple(
                p for p in profile.pre_scorers if any(p.relevant(j.request) for j in self._jobs)
            ),
        )
        self._estimator = RemainingEstimator(whole_node=gpus_per_node)  # see its docstring
        self._fresh: list[_Job] = []  # dynamic priorities: jobs pending since the last cycle
        self._seen_changes = -1  # the estimator's ``changes`` at the last full refresh
        self._versions: dict[tuple[str, float], int] = {}  # this cycle's, by class (``_version``)
        self._ranks: dict[tuple[object, ...], tuple[float, float]] = {}  # see ``_remaining``
        self._due: float | None = None  # earliest refresh of a running job; None: to be found
        self._heap: list[tuple[float, int, int, int, int]] = []  # (time, kind, seq, job, version)
        self._seq = 0
        self._allocated = 0.0
        self._by_queue: dict[str, float] = {}
        self._first_gpus: dict[str, tuple[int, ...]] = {}
        self._first_migs: dict[str, str] = {}
        self.record = RunRecord(
            policy=policy.name,
            description=policy.description,
            oracle=policy.oracle,
            total_gpus=self.total_gpus,
            entitled=self._entitled(jobs),
            restart_overhead=config.restart_overhead,
            checkpoint_interval=config.checkpoint_interval,
            preempt_grace=config.preempt_grace,
        )

    def first_placements(self) -> dict[str, tuple[int, ...]]:
        """The GPU indices each started job got when it first started, by trace job id
        (a MIG job's: none; its device is in ``first_migs``)."""
        return dict(self._first_gpus)

    def first_migs(self) -> dict[str, str]:
        """The MIG device each started MIG job got when it first started, by trace job id."""
        return dict(self._first_migs)

    # ── setup ────────────────────────────────────────────────────────────

    def _request(self, number: int, trace: TraceJob) -> JobRequest:
        memory = None
        if trace.gpu_fraction is not None and trace.num_gpus > 0:
            memory = max(1, int(trace.gpu_fraction * self._gpu_memory))
        queue = trace.queue if self.policy.queues else "default"
        selector: tuple[tuple[str, str], ...] = ()
        if self.policy.partition:
            selector = parse_selector({PARTITION_LABEL: _label(trace.queue)})
        return JobRequest(
            id=number,
            gpus=0 if trace.mig is not None else trace.num_gpus,  # as the server's snapshot
            submitted_at=trace.submit_time,
            gpu_memory=memory,
            gpu_model=trace.gpu_model,
            priority=trace.priority
            if self.policy.priority == "static" and not self.policy.strict
            else 0,
            queue=queue,
            nodes=trace.nodes,
            cpus=trace.cpus,
            max_runtime=trace.max_runtime,
            node_selector=selector,
            max_gpus=trace.max_gpus,
            mig=trace.mig,
        )

    def _queue_policy(self, jobs: Sequence[TraceJob]) -> QueuePolicy | None:
        """The declared queues; when none is declared, one queue per trace queue in one
        cohort, each guaranteed an equal share of the GPUs (lent while unused, and
        reclaimed when its queue needs it)."""
        if not self.policy.queues:
            return None
        config = self.cluster.queues
        if config is None or not config.queues:
            names = sorted({j.queue for j in jobs})
            shares = _largest_remainder([1.0] * len(names), int(self.total_gpus))
            queues = [
                {"name": n, "cohort": "sim", "guarantee": {"gpus": g}}
                for n, g in zip(names, shares, strict=True)
            ]
            config = QueuesConfig.model_validate({"cohorts": ["sim"], "queues": queues})
        return QueuePolicy.build(config)

    def _entitled(self, jobs: Sequence[TraceJob]) -> dict[str, float]:
        """Each queue's entitled share: its guarantee, or equal shares when none is declared."""
        raw = self._entitled_raw(jobs)
        total = sum(raw.values())
        return {name: value / total for name, value in raw.items()} if total > 0 else {}

    def _partitioned(
        self, views: tuple[NodeView, ...], jobs: Sequence[TraceJob]
    ) -> tuple[NodeView, ...]:
        """Static partitions: whole nodes per queue, in proportion to entitlement."""
        shares = self._entitled_raw(jobs)
        names = sorted(shares)
        counts = _largest_remainder([shares[n] for n in names], len(views))
        labelled: list[NodeView] = []
        ordered = iter(sorted(views, key=lambda v: v.name))
        for name, count in zip(names, counts, strict=True):
            for _ in range(count):
                view = next(ordered)
                labels = tuple(sorted((*view.labels, (PARTITION_LABEL, _label(name)))))
                labelled.append(replace(view, labels=labels))
                self._partition[view.name] = name
        labelled.extend(ordered)
        return tuple(labelled)

    def _entitled_raw(self, jobs: Sequence[TraceJob]) -> dict[str, float]:
        """Declared guarantees in GPUs, or 1 per trace queue when the cluster declares none."""
        config = self.cluster.queues
        if config and config.queues:
            return {q.name: float(q.guarantee.gpus or 0) for q in config.queues}
        return {name: 1.0 for name in sorted({j.queue for j in jobs})}

    # ── capacity ─────────────────────────────────────────────────────────

    def _change(self, part: Placement, request: JobRequest, sign: int) -> None:
        """The part's node with its GPUs taken (``sign`` 1) or let go (-1): a new ``NodeView``.

        A whole GPU only goes back and forth between two states, so each flip
        is made once with ``GpuView.with_job``, kept as one view per state
        (``_states``), and then looked up (``_flips``: by the identity of the
        view it flips, holding that view).
        """
        gpus = self._gpus[part.node]
        share = part.memory_per_gpu
        flips = self._flips
        for uuid in part.gpu_uuids:
            index = self._uuid_index[uuid][1]
            gpu = gpus[index]
            if share is not None:
                gpus[index] = gpu.with_job(share, sign)
                continue
            known = flips.get((id(gpu), sign))
            if known is None or known[0] is not gpu:
                after = gpu.with_job(None, sign)
                after = self._states.setdefault(after, after)
                known = flips[id(gpu), sign] = (gpu, after)
            gpus[index] = known[1]
        view = self._nodes[part.node]
        used = view.used_cpus + sign * (request.cpus or 0.0) if view.cpus is not None else 0.0
        if part.mig is not None:  # its MIG device held, or free again
            migs = tuple(replace(m, held=sign > 0) if m.uuid == part.mig else m for m in view.migs)
            view = replace(view, migs=migs)
        self._nodes[part.node] = _with_gpus(view, tuple(gpus), max(0.0, used))

    def _running_views(self, running: dict[int, _Job]) -> list[RunningJob]:
        views: list[RunningJob] = []
        extend = views.extend
        for job in running.values():
            own = job.running_views
            if not own:  # a gang holds GPUs on several nodes: one entry per node
                parts = job.parts
                own = job.running_views = (
                    (_running_view(job, parts[0]),)
                    if len(parts) == 1
                    else tuple([_running_view(job, p) for p in parts])
                )
            extend(own)
        return views

    # ── bookkeeping ──────────────────────────────────────────────────────

    def _push(self, at: float, kind: int, number: int, version: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at, kind, self._seq, number, version))

    def _note_usage(self, at: float, job: _Job | None = None, sign: int = 0) -> None:
        if job is not None:
            self._allocated += sign * job.gpus
            queue = job.trace.queue
            self._by_queue[queue] = self._by_queue.get(queue, 0.0) + sign * job.gpus
            self._point(self.record.queue_share.setdefault(queue, []), at, self._by_queue[queue])
        self._point(self.record.utilization, at, max(0.0, self._allocated))

    @staticmethod
    def _point(series: list[tuple[float, float]], at: float, value: float) -> None:
        if series and series[-1][0] == at:
            series[-1] = (at, value)
        elif not series or series[-1][1] != value:
            series.append((at, value))

    def _job_record(self, job: _Job) -> JobRecord:
        return JobRecord(
            job_id=job.trace.job_id,
            queue=job.trace.queue,
            submit=job.trace.submit_time,
            duration=job.trace.duration,
            gpus=job.trace.total_gpus,
            start=job.first_start,
            end=job.end,
            preemptions=job.preemptions,
            service=job.service,
            lost=job.lost,
        )
