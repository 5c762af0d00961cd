#!/usr/bin/env python3
"""GPU allocation under GPU sharing on the Alibaba 2023 cluster, FGD's method (ATC'23).

The 1,213 GPU nodes (6,212 GPUs) of ``openb_node_list_gpu_node.csv`` take the
pods of ``openb_pod_list_default.csv`` one by one, with no departures; each
pod is scheduled by one ``run_cycle`` on a Snapshot of the current
allocation, and a pod no node can take fails and is dropped. Reported per
policy: the percentage of GPU capacity allocated when the arrived GPU demand
(every arrived pod's GPUs, shares counted as fractions) first reaches 100% of
capacity, averaged over seeds.

As in FGD's simulator (``workloadTuningConfig: ratio 1.3``, ``shufflePod``):

* the trace asks for only 98% of the capacity, so each seed first appends
  pods drawn at random (with replacement) from the trace until the demand
  would pass ``--tune`` (1.3) x capacity, then shuffles the list;
* a share is ``gpu_milli`` thousandths of *any* GPU: every GPU is normalised
  to ``NOMINAL_GPU_MEMORY`` (1000 MiB), so a share of ``gpu_milli`` MiB is
  the same fraction on a 16 GiB T4 as on a 32 GiB V100;
* nodes count CPUs (``cpu_milli / 1000``) and pods ask for them, so the
  ``cpu_capacity`` filter applies; host memory is not modelled;
* a pod's ``gpu_spec`` becomes its ``gpu_model`` (the default pod file has none).

Policies:

* ``random``: FGD's Random-fit, a uniformly random feasible node and random
  usable GPUs, seeded. The benchmark draws the node among the nodes that pass
  the capacity checks (``random_node``); the cycle, given that one node,
  runs the filters and ``RandomPicker`` takes the GPUs;
* ``bestfit``: FGD's BestFit mapped onto gpudock, the ``binpack`` scorer
  without its CPU rule or share prices (``Binpack(cpu_aware=False,
  price_shares=False)``) and the ``best_fit`` picker: the node with the
  fewest idle GPUs left (whole GPUs and CPU-only pods) or the least free
  shareable memory left (shares), then the tightest GPU. Unlike FGD's
  BestFit it does not weigh free CPUs;
* ``fgd``: ``Fgd`` + ``FgdPicker`` with the trace's own task types (GPU
  demand and CPUs of every GPU pod, weighted by pod count), as FGD knows its
  workload from history;
* ``fgd_adaptive``: the registered ``fgd_adaptive`` scorer and picker, as a
  config names them: FGD whose fragments count GPUs beyond what a node's
  free CPUs can serve, comparing nodes first by the GPUs a pod would strand
  behind exhausted CPUs, then shares by the worth they cost at the
  cutting-stock LP's prices of the share sizes, with the task types learned
  from the pods that have arrived so far (never from pods yet to come);
* ``default``: ``build_profile(SchedulerConfig())``, whatever the default is
  (now ``binpack`` with its CPU rule and share prices: one-GPU shares placed
  by the job mix's share prices, ``policies/share_price/``, after the GPU
  capacity they would strand; other pods compared first by the GPU capacity
  they would leave stranded behind the node's free CPUs, see
  ``policies/binpack.py``; then best fit);
* ``unpriced``: the default with ``binpack``'s ``price_shares`` off (the
  default before 2026-12-02): shares by the CPU rule, then best fit.

The job mix (``Snapshot.workload``; only ``default`` reads it): every pod that
has arrived, the one being placed included, counted as the server would
count its running and pending jobs (a pod that failed would still be
pending there), through a ``MixTracker`` as the server's controller keeps
one: the mix is republished when its proportions have moved by 10% or the
pods have doubled.

Speed (decisions are exactly those of a full snapshot). Nodes in identical
states (same GPUs, allocation and CPUs) get identical verdicts and scores
(the framework's purity contract) and ties go to the lowest name, so the
Snapshot holds one node per state, the lowest-named, and only states that
pass the filters' capacity checks (``Cluster.candidates``). ``--check N``
compares N decisions of seed ``--seed0`` with full-snapshot cycles. Runs
are spread over ``--jobs`` processes.

Controls, to check that a policy's gain is not the trace's alone (same nodes):
``--cpu-scale F`` multiplies every pod's CPUs by F; ``--uniform-shares``
redraws every share pod's share uniformly from 0.05-0.95 GPU.

Usage: ``benchmarks/alibaba_sharing.py [--seeds 10] [--seed0 42] [--quick] [--check N]
[--cpu-scale F] [--uniform-shares]``; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's gpudock, not an installed one

from _meta import build_info, traces_dir  # noqa: E402  (beside this script)

from gpudock.config import PoliciesConfig, SchedulerConfig, ScorerWeight  # noqa: E402
from gpudock.scheduler.capacity import NodeState, usable_now  # noqa: E402
from gpudock.scheduler.cycle import run_cycle  # noqa: E402
from gpudock.scheduler.framework import Profile  # noqa: E402
from gpudock.scheduler.policies.binpack import Binpack  # noqa: E402
from gpudock.scheduler.policies.fgd import Fgd, FgdPicker  # noqa: E402
from gpudock.scheduler.policies.share_price.mix import MixTracker  # noqa: E402
from gpudock.scheduler.registry import build_profile  # noqa: E402
from gpudock.scheduler.session import SchedulerSession  # noqa: E402
from gpudock.scheduler.snapshot import (  # noqa: E402
    GpuView,
    JobRequest,
    NodeView,
    Placement,
    Snapshot,
    WorkloadEntry,
)
from gpudock.scheduler.workload import TaskType  # noqa: E402
from gpudock.sim.cluster import alibaba_nodes  # noqa: E402
from gpudock.sim.traces import TraceJob, load_trace  # noqa: E402

DEFAULT_TRACES = traces_dir() / "alibaba-gpu-v2023"
MiB = 2**20
MILLI = 1000
NOMINAL_GPU_MEMORY = MILLI * MiB
"""Every GPU's memory in the snapshot: a share of ``gpu_milli`` is ``gpu_milli`` MiB."""
REFERENCE = {"FGD": 95.23, "BestFit": 92.86, "Random": 86.30}
"""FGD's paper, this trace: GPU allocation (%) when arrived demand reaches 100%."""
POLICIES = ("random", "bestfit", "fgd", "fgd_adaptive", "default", "unpriced")


@dataclass(frozen=True, slots=True)
class Pod:
    """One pod as the benchmark replays it: its request and GPU demand in thousandths."""

    request: JobRequest
    demand: int  # thousandths of a GPU (num_gpus x 1000, or gpu_milli)


def make_pod(job: TraceJob, number: int) -> Pod:
    """The pod's ``JobRequest`` on nominal GPUs (see the module doc)."""
    if len(job.gpu_models) > 1:
        raise SystemExit(f"pod {job.job_id}: several acceptable GPU models are not supported")
    share = None
    demand = job.num_gpus * MILLI
    if job.gpu_fraction is not None and job.num_gpus > 0:
        demand = round(job.gpu_fraction * MILLI)
        share = demand * MiB
    request = JobRequest(
        id=number,
        gpus=job.num_gpus,
        submitted_at=0.0,
        gpu_memory=share,
        gpu_model=job.gpu_model,
        cpus=job.cpus,
    )
    return Pod(request, demand)


def arrivals(trace: Sequence[TraceJob], capacity: int, tune: float, seed: int) -> list[Pod]:
    """The trace plus pods drawn from it until demand would pass ``tune`` x capacity; shuffled."""
    rng = random.Random(seed)
    jobs = list(trace)
    demand = sum(make_pod(j, 0).demand for j in jobs)
    while True:
        extra = rng.choice(trace)
        more = make_pod(extra, 0).demand
        if demand + more > tune * capacity:
            break
        jobs.append(extra)
        demand += more
    rng.shuffle(jobs)
    return [make_pod(job, number) for number, job in enumerate(jobs)]


def workload(trace: Sequence[TraceJob]) -> list[tuple[TaskType, float]]:
    """The trace's GPU task types (GPU demand, CPUs), weighted by their number of pods."""
    counts: Counter[TaskType] = Counter()
    for job in trace:
        if job.num_gpus == 0:
            continue
        gpus = job.gpu_fraction if job.gpu_fraction is not None else float(job.num_gpus)
        counts[TaskType(gpus, job.cpus or 0.0)] += 1
    return [(task, float(n)) for task, n in counts.most_common()]


# ── the cluster: current allocation, nodes grouped by identical state ─────


def _state_key(view: NodeView) -> tuple[Any, ...]:
    """Everything a policy may read of a node except its name (and GPU uuids)."""
    gpus = tuple(_gpu_fields(g) for g in view.gpus)
    return (view.available, view.unavailable_reason, view.labels, view.taints, view.cpus,
            view.used_cpus, gpus)  # fmt: skip


def _gpu_fields(g: GpuView) -> tuple[Any, ...]:
    return (g.index, g.name, g.memory_total, g.used_memory, g.exclusive, g.shared_jobs,
            g.healthy, g.numa, g.nvlink)  # fmt: skip


@dataclass(slots=True)
class StateClass:
    """Nodes in one identical state: their names, and what the capacity checks read."""

    names: list[str]  # sorted; names[0] stands for all
    free_cpus: float  # inf when the node does not count CPUs
    idle: int  # healthy idle GPUs
    most_free: int  # bytes free on the most free healthy, non-exclusive GPU
    available: bool


Workload = tuple[WorkloadEntry, ...] | None


class Cluster:
    """The current allocation, by node; a Snapshot of it for each pod."""

    def __init__(self, views: Sequence[NodeView]) -> None:
        self.views = {v.name: v for v in views}
        self.used_cpu_milli = dict.fromkeys(self.views, 0)
        self.classes: dict[tuple[Any, ...], StateClass] = {}
        self.key_of: dict[str, tuple[Any, ...]] = {}
        for name in sorted(self.views):
            self._enter(name)

    def _enter(self, name: str) -> None:
        view = self.views[name]
        key = self.key_of[name] = _state_key(view)
        klass = self.classes.get(key)
        if klass is not None:
            klass.names.append(name)
            klass.names.sort()
            return
        good = [g for g in view.gpus if g.healthy and not g.exclusive]
        self.classes[key] = StateClass(
            names=[name],
            free_cpus=math.inf if view.cpus is None else view.cpus - view.used_cpus,
            idle=sum(1 for g in good if g.used_memory == 0 and g.shared_jobs == 0),
            most_free=max((g.memory_total - g.used_memory for g in good), default=0),
            available=view.available,
        )

    def _leave(self, name: str) -> None:
        key = self.key_of.pop(name)
        klass = self.classes[key]
        klass.names.remove(name)
        if not klass.names:
            del self.classes[key]

    def candidates(self, job: JobRequest) -> list[StateClass]:
        """The states that pass the filters' checks for ``job``: health, CPUs and GPUs.

        The same tests as ``cpu_capacity`` and ``gpu_capacity`` (with the GPU
        model), from each state's counters or, for model-constrained and
        multi-GPU shared jobs, its GPUs. Pods carry no selectors or topology.
        """
        want = job.cpus - 1e-9 if job.cpus else -math.inf  # cpus_fit's test
        live = [k for k in self.classes.values() if k.available]
        if job.gpus == 0:
            return [k for k in live if k.free_cpus >= want]
        if job.gpu_model is None and not job.shared:
            return [k for k in live if k.idle >= job.gpus and k.free_cpus >= want]
        share = job.gpu_memory or 0
        if job.gpu_model is None and job.gpus == 1:
            return [k for k in live if k.most_free >= share and k.free_cpus >= want]
        return [k for k in live if k.free_cpus >= want and self._usable(job, k) >= job.gpus]

    def _usable(self, job: JobRequest, klass: StateClass) -> int:
        """GPUs of the state ``job`` could use now (``gpu_capacity``'s count)."""
        return sum(1 for g in self.views[klass.names[0]].gpus if usable_now(job, g))

    def snapshot(
        self, job: JobRequest, classes: Sequence[StateClass], workload: Workload = None
    ) -> Snapshot:
        nodes = tuple(self.views[k.names[0]] for k in classes)
        return Snapshot(now=0.0, nodes=nodes, pending=(job,), workload=workload)

    def full_snapshot(self, job: JobRequest, workload: Workload = None) -> Snapshot:
        return Snapshot(
            now=0.0, nodes=tuple(self.views.values()), pending=(job,), workload=workload
        )

    def apply(self, placement: Placement, job: JobRequest) -> None:
        """Take the placement's GPUs and the job's CPUs (as ``sim.engine`` does)."""
        name = placement.node
        self._leave(name)
        view = self.views[name]
        gpus = list(view.gpus)
        chosen = set(placement.gpu_uuids)
        for i, gpu in enumerate(gpus):
            if gpu.uuid in chosen:
                gpus[i] = gpu.with_job(placement.memory_per_gpu)
        used = view.used_cpus
        if view.cpus is not None and job.cpus:
            self.used_cpu_milli[name] += round(job.cpus * MILLI)
            used = self.used_cpu_milli[name] / MILLI  # exact: equal milli, equal float
        self.views[name] = replace(view, gpus=tuple(gpus), used_cpus=used)
        self._enter(name)


def cluster_views(traces: Path) -> list[NodeView]:
    """The Alibaba GPU nodes with every GPU's memory set to ``NOMINAL_GPU_MEMORY``."""
    views = alibaba_nodes(traces / "openb_node_list_gpu_node.csv").node_views()
    return [
        replace(v, gpus=tuple(replace(g, memory_total=NOMINAL_GPU_MEMORY) for g in v.gpus))
        for v in views
    ]


# ── policies ─────────────────────────────────────────────────────────────


class RandomPicker:
    """``job.gpus`` GPUs drawn at random from those usable now."""

    name = "random"

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, job: JobRequest, node: NodeState) -> list[int] | None:
        usable = [g.index for g in node.gpus if usable_now(job, g)]
        return None if len(usable) < job.gpus else self.rng.sample(usable, job.gpus)


Draw = Callable[[list[StateClass]], list[StateClass]]


def random_node(rng: random.Random) -> Draw:
    """Random-fit's node: one of the feasible nodes, uniformly (a state weighs its nodes).

    Drawn before the cycle, so the cycle sees that one node: its filters
    confirm it and ``RandomPicker`` takes its GPUs. Drawing among the
    feasible states, rather than scoring every node at random, is the same
    distribution at a fraction of the cost.
    """

    def draw(classes: list[StateClass]) -> list[StateClass]:
        if not classes:
            return classes
        return rng.choices(classes, weights=[len(k.names) for k in classes])

    return draw


def _named(scorer: str, picker: str) -> Profile:
    config = SchedulerConfig(
        policies=PoliciesConfig(scorers=[ScorerWeight(name=scorer)], picker=picker)
    )
    return build_profile(config)


def _best_fit() -> Profile:
    """FGD's BestFit: ``binpack`` without its CPU rule or share prices, and ``best_fit``."""
    plain = Binpack(cpu_aware=False, price_shares=False)
    return replace(_named("binpack", "best_fit"), scorers=((plain, 1.0),))


def make_policy(
    policy: str, tasks: Sequence[tuple[TaskType, float]], seed: int
) -> tuple[Profile, Draw | None]:
    """The profile of ``policy``, and for ``random`` how it draws the node."""
    if policy == "default":
        return build_profile(SchedulerConfig()), None
    if policy == "unpriced":
        unpriced = ScorerWeight(name="binpack", options={"price_shares": False})
        return build_profile(SchedulerConfig(policies=PoliciesConfig(scorers=[unpriced]))), None
    if policy == "bestfit":
        return _best_fit(), None
    if policy == "fgd":
        base = _named("fgd", "fgd_picker")
        return replace(base, scorers=((Fgd(tasks), 1.0),), picker=FgdPicker(tasks)), None
    if policy == "fgd_adaptive":
        return _named("fgd_adaptive", "fgd_adaptive_picker"), None
    if policy == "random":
        rng = random.Random(f"random-policy-{seed}")
        return replace(_best_fit(), picker=RandomPicker(rng)), random_node(rng)
    raise ValueError(f"unknown policy {policy!r}")


# ── one run ────────────────────────────────────────────────────────────────


@dataclass(slots=True)
class RunResult:
    allocated_pct: float
    failed_pods: int
    pods: int


def replay(
    views: Sequence[NodeView],
    pods: Sequence[Pod],
    profile: Profile,
    draw: Draw | None = None,
    full: Callable[[Cluster, Pod, Placement | None, Workload], None] | None = None,
) -> RunResult:
    """Schedule ``pods`` one by one until arrived demand reaches the capacity.

    ``full``, when given, is called with the cluster before each placement is
    applied (``--check`` compares it with a full-snapshot cycle). Raises
    ``RuntimeError`` if the cycle refuses a pod that ``Cluster.candidates``
    found nodes for (the reduction would then not be exact).
    """
    cluster = Cluster(views)
    capacity = sum(len(v.gpus) for v in views) * MILLI
    arrived = allocated = failed = count = 0
    mix: Counter[tuple[int, int | None, float | None]] = Counter()
    tracker = MixTracker()  # as the server's controller keeps one
    session = SchedulerSession()  # likewise
    for pod in pods:
        count += 1
        job = pod.request
        mix[(job.gpus, job.gpu_memory, job.cpus)] += 1
        workload = tracker.workload([(g, m, c, n) for (g, m, c), n in mix.items()])
        classes = cluster.candidates(job)
        if draw is not None:
            classes = draw(classes)
        plan = run_cycle(cluster.snapshot(job, classes, workload), profile, session=session)
        placement = plan.placements[0] if plan.placements else None
        if full is not None:
            full(cluster, pod, placement, workload)
        if placement is None:
            if classes:
                raise RuntimeError(f"pod {job.id} refused on {classes[0].names[0]}: {plan}")
            failed += 1
        else:
            cluster.apply(placement, job)
            allocated += pod.demand
        arrived += pod.demand
        if arrived >= capacity:
            break
    return RunResult(100.0 * allocated / capacity, failed, count)


def check(views: Sequence[NodeView], pods: Sequence[Pod], profile: Profile, samples: int) -> int:
    """Replay ``pods``, comparing ``samples`` evenly spread decisions with a full snapshot's.

    Returns the number of decisions that differ (each is printed to stderr).
    """
    mismatches = seen = 0
    stride = max(1, len(pods) * 3 // (4 * samples))  # the replay stops at ~3/4 of the pods

    def compare(
        cluster: Cluster, pod: Pod, placement: Placement | None, workload: Workload
    ) -> None:
        nonlocal mismatches, seen
        seen += 1
        if seen % stride:
            return
        plan = run_cycle(cluster.full_snapshot(pod.request, workload), profile)
        full = plan.placements[0] if plan.placements else None
        if full != placement:
            mismatches += 1
            print(f"pod {pod.request.id}: reduced {placement} vs full {full}", file=sys.stderr)

    replay(views, pods, profile, full=compare)
    return mismatches


@dataclass(frozen=True, slots=True)
class Inputs:
    """What every run reads: the nodes, the trace, its task types, the capacity (thousandths)."""

    views: tuple[NodeView, ...]
    trace: tuple[TraceJob, ...]
    tasks: tuple[tuple[TaskType, float], ...]
    capacity: int


def load(traces: Path, cpu_scale: float = 1.0, uniform_shares: bool = False) -> Inputs:
    """The nodes and pods; the controls (``--cpu-scale``, ``--uniform-shares``) change the pods."""
    views = tuple(cluster_views(traces))
    trace = tuple(load_trace(traces / "openb_pod_list_default.csv", "alibaba").jobs)
    trace = variant(trace, cpu_scale, uniform_shares)
    capacity = sum(len(v.gpus) for v in views) * MILLI
    return Inputs(views, trace, tuple(workload(trace)), capacity)


def variant(
    trace: Sequence[TraceJob], cpu_scale: float, uniform_shares: bool
) -> tuple[TraceJob, ...]:
    """Control workloads on the same nodes: every pod's CPUs times ``cpu_scale``; with
    ``uniform_shares`` every share pod's share redrawn uniformly from 0.05-0.95 GPU (to the
    thousandth, seeded once: the same redraw for every policy and seed)."""
    rng = random.Random("uniform-shares")
    out: list[TraceJob] = []
    for job in trace:
        if cpu_scale != 1.0 and job.cpus:
            job = replace(job, cpus=job.cpus * cpu_scale)
        if uniform_shares and job.gpu_fraction is not None and job.num_gpus > 0:
            job = replace(job, gpu_fraction=rng.randint(50, 950) / MILLI)
        out.append(job)
    return tuple(out)


_INPUTS: Inputs | None = None  # set before the worker processes fork


def one_run(task: tuple[str, int, float]) -> tuple[str, int, RunResult, float]:
    """``(policy, seed, result, seconds)`` of one replay (in a worker process)."""
    policy, seed, tune = task
    assert _INPUTS is not None
    pods = arrivals(_INPUTS.trace, _INPUTS.capacity, tune, seed)
    profile, draw = make_policy(policy, _INPUTS.tasks, seed)
    started = time.perf_counter()
    result = replay(_INPUTS.views, pods, profile, draw)
    return policy, seed, result, time.perf_counter() - started


def run(args: argparse.Namespace) -> dict[str, Any]:
    global _INPUTS
    started = time.perf_counter()
    _INPUTS = inputs = load(Path(args.traces), args.cpu_scale, args.uniform_shares)
    seeds = list(range(args.seed0, args.seed0 + args.seeds))
    slow_first = sorted(args.policies, key=lambda p: not p.startswith("fgd"))
    tasks = [(policy, seed, args.tune) for policy in slow_first for seed in seeds]
    results: dict[str, dict[int, RunResult]] = {p: {} for p in args.policies}
    timing: dict[str, float] = dict.fromkeys(args.policies, 0.0)
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        for policy, seed, result, seconds in pool.imap_unordered(one_run, tasks):
            results[policy][seed] = result
            timing[policy] += seconds
    return {
        "policies": {
            policy: summary([by_seed[s] for s in seeds], timing[policy])
            for policy, by_seed in results.items()
        },
        "seeds": args.seeds,
        "seed0": args.seed0,
        "tune": args.tune,
        "nodes": len(inputs.views),
        "gpus": inputs.capacity // MILLI,
        "reference": REFERENCE,
        "seconds": round(time.perf_counter() - started, 1),
        "workers": args.jobs,
        "cpu_scale": args.cpu_scale,
        "uniform_shares": args.uniform_shares,
        **build_info(),
    }


def summary(runs: Sequence[RunResult], seconds: float) -> dict[str, Any]:
    """One policy's figures; ``seconds`` is its replay time summed over seeds."""
    return {
        "allocated_pct_mean": round(statistics.fmean(r.allocated_pct for r in runs), 2),
        "per_seed": [round(r.allocated_pct, 2) for r in runs],
        "failed_pods_mean": statistics.fmean(r.failed_pods for r in runs),
        "pods_mean": statistics.fmean(r.pods for r in runs),
        "seconds": round(seconds, 1),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    add = parser.add_argument
    add("--traces", default=str(DEFAULT_TRACES), help="the alibaba-gpu-v2023 directory")
    add("--seeds", type=int, default=10, help="runs per policy, one per seed")
    add("--seed0", type=int, default=42, help="the first seed (FGD's scripts start at 42)")
    add("--tune", type=float, default=1.3, help="inflate the pods to this x GPU capacity")
    add("--policies", nargs="+", choices=POLICIES, default=list(POLICIES))
    add("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    add("--quick", action="store_true", help="a smoke run: 2 seeds")
    add("--cpu-scale", type=float, default=1.0, help="control: every pod's CPUs times this")
    add("--uniform-shares", action="store_true",
        help="control: share pods' shares redrawn uniformly from 0.05-0.95 GPU")  # fmt: skip
    add("--check", type=int, default=0, metavar="N",
        help="compare N decisions of seed0 with full snapshots' and exit")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.cpu_scale > 0:
        parser.error(f"--cpu-scale must be > 0, got {args.cpu_scale}")
    if args.quick:
        args.seeds = 2
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not args.check:
        print(json.dumps(run(args), indent=2))
        return
    inputs = load(Path(args.traces), args.cpu_scale, args.uniform_shares)
    pods = arrivals(inputs.trace, inputs.capacity, args.tune, args.seed0)
    mismatches = {
        policy: check(inputs.views, pods, make_policy(policy, inputs.tasks, 0)[0], args.check)
        for policy in args.policies
        if policy != "random"  # its draws cannot be replayed on another snapshot
    }
    print(json.dumps({"mismatches": mismatches, "pods": args.check, **build_info()}))


if __name__ == "__main__":
    main()
