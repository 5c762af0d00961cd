"""Properties of ``schedule`` over random clusters and job streams (hypothesis).

Clusters: 1-6 nodes of 1-8 GPUs, mixed models and memory sizes, some GPUs
already held exclusively or shared, some unhealthy (on some nodes out of service),
some nodes unavailable; nodes carry zone labels, some a taint, some count CPUs, and
GPUs belong to NVLink domains and NUMA nodes. Jobs may select a zone, tolerate the taint,
require a topology, ask for CPUs, or be multi-node gangs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.config import PoliciesConfig, SchedulerConfig, ScorerWeight
from gpudock.core.affinity import Taint, Toleration, selector_matches, untolerated
from gpudock.core.inventory import gpu_model_matches
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.cycle import schedule
from gpudock.scheduler.equivalence import KeyVerdicts
from gpudock.scheduler.framework import PluginState
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import (
    GangPlacement,
    GpuView,
    JobRequest,
    NodeView,
    Placement,
    Plan,
    Snapshot,
)
from gpudock.scheduler.topology import group_of

from .builders import GiB, gpu_uuid

MODELS = {"A100-40GB": 40 * GiB, "A100-80GB": 80 * GiB, "T4": 16 * GiB, "H100": 80 * GiB}
WANTED = [None, None, "A100", "H100", "T4", "V100"]
SHARES = [1 * GiB, 4 * GiB, 8 * GiB, 16 * GiB, 20 * GiB, 40 * GiB, 80 * GiB]


TAINT = Taint("dedicated", "infra")


@st.composite
def gpus(draw: st.DrawFn, node: str, index: int, half: int) -> GpuView:
    model = draw(st.sampled_from(sorted(MODELS)))
    total = MODELS[model]
    kind = draw(st.sampled_from(["idle", "idle", "exclusive", "shared"]))
    used, exclusive, shared_jobs = 0, False, 0
    if kind == "exclusive":
        used, exclusive = total, True
    elif kind == "shared":
        used = draw(st.integers(1, total // GiB)) * GiB
        shared_jobs = draw(st.integers(1, 3))
    return GpuView(
        uuid=gpu_uuid(node, index),
        index=index,
        name=model,
        memory_total=total,
        used_memory=used,
        exclusive=exclusive,
        shared_jobs=shared_jobs,
        healthy=draw(st.sampled_from([True, True, True, True, False])),
        numa=index // half,
        nvlink=draw(st.sampled_from([None, 0, 0, index // half, index % 2])),
    )


@st.composite
def nodes(draw: st.DrawFn, name: str) -> NodeView:
    count = draw(st.integers(1, 8))
    half = max(1, count // 2)
    available = draw(st.sampled_from([True, True, True, False]))
    cpus = draw(st.sampled_from([None, None, 8.0, 32.0]))
    drawn = tuple(draw(gpus(name, i, half)) for i in range(count))
    cordoned = draw(st.booleans())  # its unhealthy GPUs out of service (gpu_health)
    return NodeView(
        name=name,
        gpus=drawn,
        available=available,
        unavailable_reason=None if available else "heartbeat lost",
        labels=(("zone", draw(st.sampled_from(["a", "b"]))),),
        taints=draw(st.sampled_from([(), (), (), (TAINT,)])),
        cpus=cpus,
        used_cpus=0.0 if cpus is None else float(draw(st.integers(0, int(cpus)))),
        out_of_service=tuple((g.index, "cordoned") for g in drawn if cordoned and not g.healthy),
    )


@st.composite
def jobs(draw: st.DrawFn, job_id: int) -> JobRequest:
    return JobRequest(
        id=job_id,
        gpus=draw(st.sampled_from([0, 1, 1, 1, 2, 2, 3, 4, 8])),
        submitted_at=float(draw(st.integers(0, 5))),
        gpu_memory=draw(st.sampled_from([None, None, *SHARES])),
        gpu_model=draw(st.sampled_from(WANTED)),
        priority=draw(st.integers(-2, 2)),
        node_selector=draw(st.sampled_from([(), (), (), (("zone", "a"),)])),
        tolerations=draw(st.sampled_from([(), (), (Toleration("dedicated"),)])),
        topology=draw(st.sampled_from([None, None, None, "nvlink", "numa"])),
        cpus=draw(st.sampled_from([None, None, 2.0, 16.0])),
        nodes=draw(st.sampled_from([1, 1, 1, 1, 1, 2, 3])),
    )


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    names = [f"n{i}" for i in range(draw(st.integers(1, 6)))]
    job_count = draw(st.integers(0, 20))
    return Snapshot(
        now=0.0,
        nodes=tuple(draw(nodes(n)) for n in names),
        pending=tuple(draw(jobs(i)) for i in range(1, job_count + 1)),
    )


configs = st.sampled_from(
    [
        SchedulerConfig(placement="binpack"),
        SchedulerConfig(placement="spread"),
        SchedulerConfig(  # binpack without its share prices (policies/share_price/)
            policies=PoliciesConfig(
                scorers=[ScorerWeight(name="binpack", options={"price_shares": False})]
            )
        ),
    ]
)


@dataclass
class _Gpu:
    view: GpuView
    used: int
    exclusive: bool
    shares: int


def _parts(plan: Plan) -> list[Placement]:
    """Every placement, gang parts included, in plan order (gangs after single-node jobs)."""
    return [*plan.placements, *(p for g in plan.gangs for p in g.parts)]


def _replay(snapshot: Snapshot, plan: Plan) -> None:
    """Apply the plan's placements in order, checking each against current state."""
    gpus = {
        g.uuid: (n, _Gpu(g, g.used_memory, g.exclusive, g.shared_jobs))
        for n in snapshot.nodes
        for g in n.gpus
    }
    nodes_by_name = {n.name: n for n in snapshot.nodes}
    free_cpus = {n.name: (n.cpus or 0.0) - n.used_cpus for n in snapshot.nodes}
    jobs_by_id = {j.id: j for j in snapshot.pending}
    for p in plan.placements:
        assert jobs_by_id[p.job_id].nodes == 1, "a gang placed as a single-node job"
    for gang in plan.gangs:
        job = jobs_by_id[gang.job_id]
        assert len(gang.parts) == job.nodes, "a gang is all or nothing"
        assert len({part.node for part in gang.parts}) == job.nodes, "gang parts share a node"
        assert all(part.job_id == job.id for part in gang.parts)
    for p in _parts(plan):
        job = jobs_by_id[p.job_id]
        view = nodes_by_name[p.node]
        assert selector_matches(job.node_selector, view.labels), "node selector ignored"
        assert not untolerated(view.taints, job.tolerations), "untolerated taint ignored"
        if job.cpus and view.cpus is not None:
            free_cpus[p.node] -= job.cpus
            assert free_cpus[p.node] >= -1e-9, "CPUs over-allocated"
        assert len(p.gpu_uuids) == job.gpus == len(set(p.gpu_uuids)), "all-or-nothing, distinct"
        if job.topology is not None and job.gpus >= 2:
            groups = {group_of(gpus[u][1].view, job.topology) for u in p.gpu_uuids}  # type: ignore[arg-type]
            assert len(groups) == 1 and None not in groups, f"{job.topology} topology ignored"
        for uuid in p.gpu_uuids:
            node, gpu = gpus[uuid]
            assert node.name == p.node and node.available and gpu.view.healthy
            if job.gpu_model is not None:
                assert gpu_model_matches(job.gpu_model, gpu.view.name)
            if job.shared:
                assert p.memory_per_gpu == job.gpu_memory is not None
                assert not gpu.exclusive, "a shared job on an exclusive GPU"
                gpu.used += job.gpu_memory
                gpu.shares += 1
            else:
                assert p.memory_per_gpu is None
                assert not gpu.exclusive and gpu.shares == 0 and gpu.used == 0, "GPU not idle"
                gpu.exclusive, gpu.used = True, gpu.view.memory_total
            assert gpu.used <= gpu.view.memory_total, "GPU memory over-allocated"


@settings(max_examples=150, deadline=None)
@given(snapshots(), configs)
def test_plans_never_over_allocate_and_respect_constraints(
    snapshot: Snapshot, config: SchedulerConfig
) -> None:
    _replay(snapshot, schedule(snapshot, config))


@settings(max_examples=150, deadline=None)
@given(snapshots(), configs)
def test_every_job_is_placed_once_or_pending_with_a_reason(
    snapshot: Snapshot, config: SchedulerConfig
) -> None:
    plan = schedule(snapshot, config)
    placed = [p.job_id for p in plan.placements] + [g.job_id for g in plan.gangs]
    assert len(placed) == len(set(placed))
    assert not set(placed) & set(plan.pending)
    assert set(placed) | set(plan.pending) == {j.id for j in snapshot.pending}
    for reasons in plan.pending.values():
        assert reasons and all(r.message and r.layer for r in reasons)


@settings(max_examples=150, deadline=None)
@given(snapshots(), configs, st.randoms(use_true_random=False))
def test_deterministic_and_independent_of_input_order(
    snapshot: Snapshot, config: SchedulerConfig, rnd: random.Random
) -> None:
    plan = schedule(snapshot, config)
    assert schedule(snapshot, config) == plan
    shuffled_nodes, shuffled_jobs = list(snapshot.nodes), list(snapshot.pending)
    rnd.shuffle(shuffled_nodes)
    rnd.shuffle(shuffled_jobs)
    shuffled = Snapshot(snapshot.now, tuple(shuffled_nodes), tuple(shuffled_jobs))
    assert schedule(shuffled, config) == plan


def _naive_plan(snapshot: Snapshot, config: SchedulerConfig) -> Plan:
    """Reference: filter and score every node for every job; explain from scratch at the end.

    The profile is the cycle's: ``binpack`` with the snapshot's share prices (the
    pre-score plugins run once, as the cycle runs them)."""
    profile = build_profile(config)
    state = CycleState(snapshot.nodes)
    for plugin in profile.pre_scorers:
        plugin.pre_score(snapshot, profile, state, PluginState())
    plan = Plan()
    blocked = []
    for job in sorted(snapshot.pending, key=profile.order.key):
        feasible = [
            n for n in state.nodes.values() if all(f.filter(job, n).ok for f in profile.filters)
        ]
        if len(feasible) < job.nodes:
            blocked.append(job)
            continue
        feasible.sort(
            key=lambda n: (-sum(w * s.score(job, n, state) for s, w in profile.scorers), n.name),
        )
        picks = [(n.name, profile.picker.pick(job, n, state)) for n in feasible[: job.nodes]]
        parts = []
        for name, picked in picks:
            assert picked is not None
            parts.append(state.reserve(job, name, picked))
        if job.nodes == 1:
            plan.placements.append(parts[0])
        else:
            plan.gangs.append(GangPlacement(job.id, tuple(parts)))
    for job in blocked:
        verdicts = KeyVerdicts(job, state, profile)
        if job.nodes == 1:
            assert verdicts.best() is None, "capacity only shrinks: a blocked job stays blocked"
            plan.pending[job.id] = verdicts.reasons()
        else:
            assert len(verdicts.ranked()) < job.nodes
    return plan


@settings(max_examples=150, deadline=None)
@given(snapshots(), configs)
def test_shared_incremental_verdicts_equal_evaluating_every_node_for_every_job(
    snapshot: Snapshot, config: SchedulerConfig
) -> None:
    plan, naive = schedule(snapshot, config), _naive_plan(snapshot, config)
    assert (plan.placements, plan.gangs) == (naive.placements, naive.gangs)
    gangs = {j.id for j in snapshot.pending if j.nodes > 1}
    assert {k: v for k, v in plan.pending.items() if k not in gangs} == naive.pending
