"""Fragmentation gradient descent: the fragmentation measure, the scorer and the picker."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gpudock.config import PoliciesConfig, SchedulerConfig, ScorerWeight
from gpudock.scheduler.capacity import CycleState, NodeState
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.framework import Profile
from gpudock.scheduler.policies.fgd import Fgd, FgdPicker, best_choice, fragmentation, summarize
from gpudock.scheduler.registry import REGISTRY, build_profile
from gpudock.scheduler.snapshot import JobRequest, NodeView, Plan
from gpudock.scheduler.workload import DEFAULT_WORKLOAD, Fragmentation, TaskType, Workload

from .builders import make_job, make_node, make_snapshot, no_data

GiB = 2**30


def state_of(view: NodeView) -> NodeState:
    return NodeState.from_view(view)


def fgd_profile(workload: Workload | None = None) -> Profile:
    """The registered ``fgd`` + ``fgd_picker``, with ``workload`` when given."""
    config = SchedulerConfig(
        policies=PoliciesConfig(scorers=[ScorerWeight(name="fgd")], picker="fgd_picker")
    )
    profile = build_profile(config)
    if workload is None:
        return profile
    return replace(profile, scorers=((Fgd(workload), 1.0),), picker=FgdPicker(workload))


# ── the fragmentation measure ─────────────────────────────────────────────


def test_summary_counts_free_thousandths_of_usable_gpus() -> None:
    node = state_of(
        make_node("n")
        .gpus(4, memory="80GiB")
        .shared(0, "20GiB")
        .exclusive(1)
        .unhealthy(3)
        .cpus(16, used=4)
        .build()
    )
    # GPU 0: 60 of 80 GiB free; 1: held whole; 2: idle; 3: unhealthy.
    assert summarize(node) == ((750, 1000), 12)
    assert summarize(state_of(make_node("m").gpus(1).build())) == ((1000,), None)


def test_fragmentation_by_hand() -> None:
    # GPU 0 half used, GPU 1 idle; 12 CPUs free.
    node = state_of(make_node("n").gpus(2).shared(0, "40GiB").cpus(16, used=4).build())
    workload = [
        (TaskType(0.5), 1.0),  # fits GPU 0 or 1: no fragment
        (TaskType(0.75), 1.0),  # GPU 0's 0.5 is too little: 0.5
        (TaskType(1), 1.0),  # needs an idle GPU: GPU 0's 0.5 is a fragment
        (TaskType(2), 1.0),  # cannot fit (one idle GPU): all 1.5 free
        (TaskType(0.25, cpus=20), 1.0),  # cannot fit (12 CPUs free): all 1.5
    ]
    assert Fragmentation(workload).of(summarize(node)) == pytest.approx(
        (0 + 0.5 + 0.5 + 1.5 + 1.5) / 5
    )


def test_an_idle_node_fragments_only_for_tasks_larger_than_it() -> None:
    frag = Fragmentation(DEFAULT_WORKLOAD)  # 0.25, 0.5, 1, 2, 4, 8 GPUs
    assert frag.of(summarize(state_of(make_node("big").gpus(8).build()))) == 0
    # 4 and 8 GPUs never fit on 2 GPUs: 2 free GPUs for 2 of the 6 task types.
    two = frag.of(summarize(state_of(make_node("two").gpus(2).build())))
    assert two == pytest.approx(2 * 2 / 6)
    assert frag.of(((), 8.0)) == 0  # nothing free, nothing fragmented


def test_task_types_are_validated() -> None:
    with pytest.raises(ValueError, match="CPU-only"):
        TaskType(0)
    with pytest.raises(ValueError, match="whole number"):
        TaskType(1.5)
    with pytest.raises(ValueError, match="negative"):
        TaskType(1, cpus=-1)
    with pytest.raises(ValueError, match="popularity"):
        Fragmentation([(TaskType(1), 0.0)])


# ── scorer and picker ─────────────────────────────────────────────────────


def test_a_half_gpu_task_fills_the_half_used_gpu_rather_than_splitting_an_idle_one() -> None:
    node = state_of(make_node("n").gpus(2).shared(1, "40GiB").build())
    job = make_job(1).gpu_memory("40GiB").build()
    assert FgdPicker().pick(job, node, no_data()) == [1]
    # Splitting GPU 0 would leave two half GPUs, useless to whole-GPU tasks.
    frag = fragmentation(DEFAULT_WORKLOAD)
    split = frag.of(((500, 500), None)) - frag.of(summarize(node))
    assert Fgd().score(job, node, no_data()) > -split


def test_prefers_the_node_whose_leftover_the_popular_tasks_can_still_use() -> None:
    workload = [(TaskType(0.5), 9.0), (TaskType(1), 1.0)]
    roomy = make_node("a-roomy").gpus(1).shared(0, "20GiB").build()  # 0.75 free -> 0.5 left
    tight = make_node("b-tight").gpus(1).shared(0, "40GiB").build()  # 0.5 free -> 0.25 left
    job = make_job(1).gpu_memory("20GiB").build()
    snapshot = make_snapshot([roomy, tight], [job])
    assert run_cycle(snapshot, fgd_profile(workload)).placements[0].node == "a-roomy"
    # Best fit takes the tightest node, stranding a quarter GPU no 0.5 task can use.
    assert run_cycle(snapshot, build_profile(SchedulerConfig())).placements[0].node == "b-tight"


def test_whole_gpu_jobs_keep_big_idle_nodes_whole() -> None:
    # Default mix: an 8-GPU job needs a whole 8-GPU node; a 1-GPU job goes elsewhere.
    big = make_node("a-big").gpus(8).build()
    small = make_node("b-small").gpus(4).exclusive(0).build()
    plan = run_cycle(make_snapshot([big, small], [make_job(1).build()]), fgd_profile())
    assert plan.placements[0].node == "b-small"


def test_cpu_only_jobs_avoid_starving_gpu_tasks_of_cpus() -> None:
    workload = [(TaskType(1, cpus=8), 1.0)]
    with_gpus = make_node("a-gpus").gpus(2).cpus(16).build()
    busy = make_node("b-busy").gpus(2).exclusive(0, 1).cpus(16).build()
    job = make_job(1).gpus(0).cpus(12).build()
    plan = run_cycle(make_snapshot([with_gpus, busy], [job]), fgd_profile(workload))
    assert plan.placements[0].node == "b-busy"


def test_equal_rises_go_to_the_node_left_fullest() -> None:
    # The default mix asks for no CPUs: a CPU-only job changes no node's F_n.
    roomy = make_node("a-roomy").gpus(2).cpus(32).build()
    fuller = make_node("b-fuller").gpus(2).exclusive(0).cpus(32).build()
    job = make_job(1).gpus(0).cpus(4).build()
    plan = run_cycle(make_snapshot([roomy, fuller], [job]), fgd_profile())
    assert plan.placements[0].node == "b-fuller"


def test_a_multi_gpu_share_takes_distinct_gpus_greedily() -> None:
    node = state_of(make_node("n").gpus(4).shared(2, "40GiB").shared(3, "60GiB").build())
    job = make_job(1).gpus(2).gpu_memory("20GiB").build()
    picked = FgdPicker().pick(job, node, no_data())
    assert picked is not None and len(set(picked)) == 2
    assert set(picked) == {2, 3}  # the partly used GPUs, keeping 0 and 1 idle


def random_node(rng: random.Random, name: str) -> NodeView:
    gpus = rng.choice([1, 2, 4, 8])
    builder = make_node(name).gpus(gpus, memory="16GiB").cpus(32, used=rng.choice([0, 8, 24]))
    for i in range(gpus):
        roll = rng.random()
        if roll < 0.2:
            builder.exclusive(i)
        elif roll < 0.6:
            builder.shared(i, rng.randrange(1, 16) * GiB, jobs=1)
    return builder.build()


def random_job(rng: random.Random, job_id: int) -> JobRequest:
    builder = make_job(job_id).cpus(rng.choice([0, 2, 6]))
    roll = rng.random()
    if roll < 0.5:
        builder.gpu_memory(rng.randrange(1, 12) * GiB)
    elif roll < 0.6:
        builder.gpus(2).gpu_memory(rng.randrange(1, 8) * GiB)
    elif roll < 0.9:
        builder.gpus(rng.choice([1, 2]))
    else:
        builder.gpus(0)
    return builder.build()


def test_the_picker_takes_the_gpus_the_scorer_scored() -> None:
    rng = random.Random(7)
    frag = fragmentation(DEFAULT_WORKLOAD)
    checked = 0
    for i in range(300):
        view, job = random_node(rng, f"n{i}"), random_job(rng, i)
        state = CycleState([view])
        node = state.nodes[view.name]
        if not all(f.filter(job, node).ok for f in fgd_profile().filters):
            continue
        before = frag.of(summarize(node))
        scored = best_choice(frag, job, node, pick=False)  # what Fgd.score ranks by
        assert scored is not None
        gpus = FgdPicker().pick(job, node, no_data())
        assert gpus is not None
        state.reserve(job, view.name, gpus)
        assert scored.rise == pytest.approx(frag.of(summarize(node)) - before)
        assert scored.left == pytest.approx(sum(summarize(node)[0]) / 1000)
        checked += 1
    assert checked > 100


def test_a_one_gpu_share_goes_where_fragmentation_rises_least() -> None:
    rng = random.Random(11)
    frag = fragmentation(DEFAULT_WORKLOAD)
    for i in range(200):
        view = random_node(rng, f"n{i}")
        job = make_job(i).gpu_memory(rng.randrange(1, 12) * GiB).build()
        rises = []
        for gpu in view.gpus:
            state = CycleState([view])
            node = state.nodes[view.name]
            before = frag.of(summarize(node))
            if gpu.healthy and not gpu.exclusive and gpu.free_memory >= (job.gpu_memory or 0):
                state.reserve(job, view.name, [gpu.index])
                rises.append(frag.of(summarize(node)) - before)
        node = state_of(view)
        if rises:
            choice = best_choice(frag, job, node)
            assert choice is not None
            assert choice.rise == pytest.approx(min(rises))
            assert Fgd().score(job, node, no_data()) == pytest.approx(-min(rises), abs=1e-6)
        else:
            assert FgdPicker().pick(job, node, no_data()) is None


def assert_never_over_allocated(snapshot_nodes: list[NodeView], plan: Plan) -> None:
    jobs = {j.id: j for j in SNAPSHOT_JOBS}
    views = {v.name: v for v in snapshot_nodes}
    memory: dict[str, int] = {}
    exclusive: set[str] = set()
    shared: set[str] = set()
    cpus: dict[str, float] = {}
    for p in plan.placements:
        job = jobs[p.job_id]
        assert len(set(p.gpu_uuids)) == job.gpus
        cpus[p.node] = cpus.get(p.node, 0.0) + (job.cpus or 0.0)
        for uuid in p.gpu_uuids:
            if p.memory_per_gpu is None:
                assert uuid not in exclusive and uuid not in shared
                exclusive.add(uuid)
            else:
                assert uuid not in exclusive
                shared.add(uuid)
                memory[uuid] = memory.get(uuid, 0) + p.memory_per_gpu
    for name, used in cpus.items():
        assert used <= (views[name].cpus or 0) + 1e-9
    totals = {g.uuid: g.memory_total for v in snapshot_nodes for g in v.gpus}
    for uuid, used in memory.items():
        assert used <= totals[uuid]


_RNG = random.Random(3)
SNAPSHOT_JOBS = [random_job(_RNG, i) for i in range(120)]


def test_a_cycle_with_fgd_places_jobs_and_never_over_allocates() -> None:
    nodes = [make_node(f"n{i}").gpus(g, memory="16GiB").cpus(48).build() for i, g in
             enumerate([8, 8, 4, 4, 2, 2, 1, 1])]  # fmt: skip
    snapshot = make_snapshot(nodes, SNAPSHOT_JOBS)
    plan = run_cycle(snapshot, fgd_profile())
    assert len(plan.placements) > 20
    assert len(plan.placements) + len(plan.pending) == len(SNAPSHOT_JOBS)
    assert_never_over_allocated(nodes, plan)


def test_the_registered_policies_use_the_default_workload() -> None:
    scorer, picker = REGISTRY["fgd"], REGISTRY["fgd_picker"]
    assert callable(scorer) and callable(picker)
    assert isinstance(scorer(), Fgd) and isinstance(picker(), FgdPicker)
    assert [p.name for p, _ in fgd_profile().scorers] == ["fgd"]
    assert fgd_profile().picker.name == "fgd_picker"
