"""The capacity index (fast path) gives exactly the generic path's Plan.

``run_cycle(..., index=False)`` forces the generic path (every policy on
every node, ``equivalence.py``); the default uses ``indexed.py`` whenever the
profile is the built-in one. Clusters here are built to hit the index's edge
cases: many identical nodes (ties to the lowest name), nodes mixing GPU
models, nodes without GPUs, inconsistent GPU memory counts, unavailable
nodes, and job streams that repeat the same request many times. Nodes carry
zone labels, sometimes a taint, host memory (some of it taken) and unhealthy GPUs out
of service (what ``gpu_health`` reads); requests
may select a zone, tolerate the taint, ask for memory, and some (gangs,
topology, CPUs) take the generic path inside the indexed cache.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.config import SchedulerConfig
from gpudock.core.affinity import Taint, Toleration
from gpudock.scheduler.accel.declared import usable
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import GpuView, JobRequest, NodeView, Snapshot

from ..builders import GiB, gpu_uuid, make_job, make_node, make_snapshot
from ..test_framework import CountingFilter

MODELS = {"A100-40GB": 40 * GiB, "A100-80GB": 80 * GiB, "H100": 80 * GiB, "T4": 16 * GiB}
WANTED = [None, None, None, "A100", "a100-80gb", "H100", "T4", "V100"]
SHARES = [4 * GiB, 10 * GiB, 16 * GiB, 20 * GiB, 40 * GiB, 80 * GiB, 100 * GiB]

GpuSpec = tuple[str, str, int, bool]  # model, state, used GiB, healthy


@st.composite
def gpu_specs(draw: st.DrawFn, models: list[str]) -> GpuSpec:
    states = ["idle", "idle", "exclusive", "shared", "shared", "overfull", "negative"]
    state = draw(st.sampled_from(states))
    total = MODELS[models[0]] // GiB
    return (
        draw(st.sampled_from(models)),
        state,
        draw(st.integers(1, total)),
        draw(st.sampled_from([True, True, True, True, False])),
    )


def build_gpu(node: str, index: int, spec: GpuSpec) -> GpuView:
    model, state, used_gib, healthy = spec
    total = MODELS[model]
    used, exclusive, shares = 0, False, 0
    if state == "exclusive":
        used, exclusive = total, True
    elif state == "shared":
        used, shares = min(used_gib * GiB, total), 1 + used_gib % 3
    elif state == "overfull":  # inconsistent input: more held than the GPU has
        used, shares = total + GiB, 2
    elif state == "negative":  # inconsistent input: more free than the GPU has
        used, shares = -used_gib * GiB, 1
    return GpuView(gpu_uuid(node, index), index, model, total, used, exclusive, shares, healthy)


def out_of_service(gpus: tuple[GpuView, ...]) -> tuple[tuple[int, str], ...]:
    """Why each unhealthy GPU of ``gpus`` is out of service (``NodeView.out_of_service``)."""
    return tuple((g.index, "cordoned: cordoned by admin") for g in gpus if not g.healthy)


Template = tuple[list[GpuSpec], bool, str, tuple[Taint, ...], float | None, int | None]


@st.composite
def node_templates(draw: st.DrawFn) -> Template:
    """GPUs of one or two models (a mixed node), or none; whether the node is available;
    its zone label, taints, CPUs and host memory."""
    models = draw(st.sampled_from([[m] for m in MODELS] + [["A100-80GB", "H100"], ["T4", "H100"]]))
    specs = draw(st.lists(gpu_specs(models), min_size=0, max_size=8))
    return (
        specs,
        draw(st.sampled_from([True, True, True, True, False])),
        draw(st.sampled_from(["a", "b"])),
        draw(st.sampled_from([(), (), (), (Taint("dedicated", "infra"),)])),
        draw(st.sampled_from([None, None, None, 16.0, 6.0])),
        draw(st.sampled_from([None, None, 64 * GiB, 256 * GiB])),
    )


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    templates = draw(st.lists(node_templates(), min_size=1, max_size=4))
    count = draw(st.integers(0, 16))
    names = draw(st.permutations([f"n{i:02d}" for i in range(count)]))
    nodes = []
    for name in names:  # several nodes per template: equal capacities, ties by name
        specs, available, zone, taints, cpus, memory = draw(st.sampled_from(templates))
        gpus = tuple(build_gpu(name, i, spec) for i, spec in enumerate(specs))
        reason = None if available else draw(st.sampled_from([None, "heartbeat lost"]))
        labels = (("zone", zone),)
        used = 0.0 if cpus is None else float(draw(st.integers(0, int(cpus))))
        held = 0 if memory is None else draw(st.sampled_from([0, 0, memory // 2, memory]))
        view = NodeView(name, gpus, available, reason, labels, taints, cpus, used, memory, held)
        if draw(st.booleans()):  # its unhealthy GPUs out of service: gpu_health rejects some
            view = replace(view, out_of_service=out_of_service(gpus))
        nodes.append(view)
    keys = draw(st.lists(request_keys(), min_size=1, max_size=6))
    jobs = []
    for i in range(1, draw(st.integers(0, 40)) + 1):
        gpus, submitted, share, model, selector, tolerations, extra = draw(st.sampled_from(keys))
        job = JobRequest(
            i,
            gpus,
            submitted,
            share,
            model,
            priority=draw(st.integers(0, 2)),
            node_selector=selector,
            tolerations=tolerations,
        )
        jobs.append(replace(job, **extra))  # type: ignore[arg-type]
    return Snapshot(0.0, tuple(nodes), tuple(jobs))


GENERIC_FIELDS: list[dict[str, object]] = [
    {},
    {},
    {},
    {"nodes": 2},
    {"topology": "nvlink"},
    {"cpus": 4.0},
    {"cpus": 1.5},
    {"cpus": 12.0},
    {"cpus": 4.0, "nodes": 2},
    {"memory": 16 * GiB},
    {"memory": 100 * GiB},
    {"cpus": 4.0, "memory": 32 * GiB},
]


@st.composite
def request_keys(draw: st.DrawFn) -> tuple[object, ...]:
    """``(gpus, submitted_at, gpu_memory, gpu_model, selector, tolerations, generic fields)``:
    few distinct ones, so jobs repeat them."""
    return (
        draw(st.sampled_from([0, 1, 1, 1, 2, 2, 3, 4, 8, 9])),
        float(draw(st.integers(0, 3))),
        draw(st.sampled_from([None, None, *SHARES])),
        draw(st.sampled_from(WANTED)),
        draw(st.sampled_from([(), (), (("zone", "a"),), (("zone", "c"),)])),
        draw(st.sampled_from([(), (), (Toleration("dedicated"),)])),
        draw(st.sampled_from(GENERIC_FIELDS)),
    )


configs = st.sampled_from(
    [
        SchedulerConfig(placement="binpack"),  # one-GPU shares by the job mix's prices
        SchedulerConfig(placement="spread"),
        SchedulerConfig.model_validate(  # plain best fit: the first node with the CPUs
            {
                "policies": {
                    "scorers": [
                        {"name": "binpack", "options": {"cpu_aware": False, "price_shares": False}}
                    ]
                }
            }
        ),
        SchedulerConfig.model_validate(  # shares without prices, by the CPU rule
            {"policies": {"scorers": [{"name": "binpack", "options": {"price_shares": False}}]}}
        ),
    ]
)


@settings(max_examples=400, deadline=None)
@given(snapshots(), configs)
def test_the_index_gives_the_generic_plan(snapshot: Snapshot, config: SchedulerConfig) -> None:
    profile = build_profile(config)
    assert usable(profile)
    assert run_cycle(snapshot, profile) == run_cycle(snapshot, profile, index=False)


@st.composite
def cpu_snapshots(draw: st.DrawFn) -> Snapshot:
    """``snapshots`` where most nodes count CPUs (some nearly used up) and most jobs ask for
    them: the walk of ``CpuVerdicts`` and binpack's CPU rule at work."""
    snapshot = draw(snapshots())
    nodes = []
    for node in snapshot.nodes:
        cpus = draw(st.sampled_from([None, 2.0, 8.0, 16.0, 64.0]))
        used = 0.0 if cpus is None else draw(st.sampled_from([0.0, cpus / 2, cpus - 1.0]))
        nodes.append(replace(node, cpus=cpus, used_cpus=max(0.0, used)))
    jobs = [
        replace(job, cpus=draw(st.sampled_from([None, 1.0, 2.0, 4.0, 8.0, 24.0])))
        for job in snapshot.pending
    ]
    return replace(snapshot, nodes=tuple(nodes), pending=tuple(jobs))


@settings(max_examples=300, deadline=None)
@given(cpu_snapshots(), configs)
def test_the_index_gives_the_generic_plan_for_jobs_asking_for_cpus(
    snapshot: Snapshot, config: SchedulerConfig
) -> None:
    profile = build_profile(config)
    assert run_cycle(snapshot, profile) == run_cycle(snapshot, profile, index=False)


@st.composite
def stranding_snapshots(draw: st.DrawFn) -> Snapshot:
    """Every node counts CPUs (now and then one does not) and GPU shares ask for many: a
    share strands capacity on most or all nodes, so ``CpuVerdicts`` walks far and stops
    on the bound of ``_floor``. Nodes repeat a few templates (alike nodes: the exact
    bound) of one or two GPU sizes, some GPUs partly taken; shares repeat their keys."""
    templates = []
    for _ in range(draw(st.integers(1, 3))):
        models = draw(st.sampled_from([["A100-80GB"], ["A100-40GB"], ["T4"], ["H100", "T4"]]))
        gpus = draw(st.integers(1, 8))
        cpus = draw(st.sampled_from([4.0, 8.0, 16.0, 32.0, 64.0, None] if draw(st.booleans())
                                    else [8.0, 16.0, 32.0, 64.0]))  # fmt: skip
        templates.append((models, gpus, cpus))
    nodes = []
    for i in range(draw(st.integers(1, 12))):
        models, count, cpus = draw(st.sampled_from(templates))
        name = f"n{i:02d}"
        gpus = []
        for g in range(count):
            model = models[g % len(models)]
            total = MODELS[model]
            used_gib = draw(st.sampled_from([0, 0, 0, 4, 10, 20]))
            used = min(used_gib * GiB, total)
            gpus.append(GpuView(gpu_uuid(name, g), g, model, total, used, False, int(used > 0)))
        used_cpus = 0.0 if cpus is None else draw(st.sampled_from([0.0, 0.0, 1.0, cpus / 2]))
        nodes.append(NodeView(name, tuple(gpus), True, None, (), (), cpus, used_cpus))
    keys = [
        (
            draw(st.sampled_from([1, 1, 2])),
            draw(st.sampled_from([4 * GiB, 10 * GiB, 16 * GiB, 20 * GiB])),
            draw(st.sampled_from([2.0, 4.0, 8.0, 16.0, 24.0])),
        )
        for _ in range(draw(st.integers(1, 3)))
    ]
    jobs = []
    for i in range(1, draw(st.integers(1, 30)) + 1):
        gpus, share, cpus = draw(st.sampled_from(keys))
        jobs.append(JobRequest(i, gpus, float(i), share, cpus=cpus))
    return Snapshot(0.0, tuple(nodes), tuple(jobs))


@settings(max_examples=400, deadline=None)
@given(stranding_snapshots(), configs)
def test_the_index_gives_the_generic_plan_where_shares_strand_gpus_everywhere(
    snapshot: Snapshot, config: SchedulerConfig
) -> None:
    profile = build_profile(config)
    assert run_cycle(snapshot, profile) == run_cycle(snapshot, profile, index=False)


def test_a_walk_where_every_node_strands_reaches_a_node_with_larger_gpus() -> None:
    """The share strands capacity on both nodes (each has just the job's CPUs free). a
    comes first (16GiB free) and strands 0.75 of its 16GiB GPU; b (20GiB free) strands
    0.2 of its 80GiB GPU, so b is best. The bound that stops the walk must measure free
    capacity in the largest GPUs of the class: in a's 16GiB ones, b would seem to strand
    a whole GPU and be passed over."""
    nodes = [
        make_node("a").gpus(1, model="T4", memory="16GiB").cpus(8),
        make_node("b").gpus(1, model="A100-80GB").shared(0, "60GiB").cpus(8),
    ]
    snapshot = make_snapshot(nodes, [make_job(1).gpus(1).gpu_memory("4GiB").cpus(8)])
    profile = build_profile(SchedulerConfig())
    plan = run_cycle(snapshot, profile)
    assert [(p.job_id, p.node) for p in plan.placements] == [(1, "b")]
    assert plan == run_cycle(snapshot, profile, index=False)


def test_a_cpu_job_sees_a_node_that_another_job_moved_ahead_of_where_its_walk_stopped() -> None:
    """``CpuVerdicts`` keeps its verdicts between jobs of one key. n0 lacks the CPUs, n1
    would strand a GPU, n2 strands nothing: job 1 goes to n2 and its walk stops there.
    Job 2 (5 GPUs, no CPUs) can only go to n3, which then has 1 idle GPU: it now comes
    before n2 in binpack's order, where job 1's walk never looked, and strands nothing
    for job 3 (it keeps 40 free CPUs): job 3 must go there."""
    nodes = [
        make_node("n0").gpus(8).exclusive(*range(7)).cpus(64, used=64),
        make_node("n1").gpus(8).exclusive(*range(6)).cpus(64, used=56),
        make_node("n2").gpus(8).exclusive(*range(4)).cpus(64, used=32),
        make_node("n3").gpus(8).exclusive(0, 1).cpus(64, used=16),
    ]
    jobs = [
        make_job(1).gpus(1).cpus(8).submitted(1),
        make_job(2).gpus(5).submitted(2),
        make_job(3).gpus(1).cpus(8).submitted(3),
    ]
    snapshot = make_snapshot(nodes, jobs)
    profile = build_profile(SchedulerConfig())
    plan = run_cycle(snapshot, profile)
    assert [(p.job_id, p.node) for p in plan.placements] == [(1, "n2"), (2, "n3"), (3, "n3")]
    assert plan == run_cycle(snapshot, profile, index=False)


def test_every_profile_with_a_filter_declaring_the_gpu_rule_is_indexed() -> None:
    profile = build_profile(SchedulerConfig())
    assert usable(profile)
    assert usable(replace(profile, filters=(CountingFilter(), *profile.filters)))
    assert usable(replace(profile, filters=profile.filters[::-1]))
    assert usable(replace(profile, scorers=((profile.scorers[0][0], 2.0),)))
    assert usable(replace(profile, scorers=profile.scorers * 2))
    no_gpus = tuple(f for f in profile.filters if f.name != "gpu_capacity")
    assert not usable(replace(profile, filters=no_gpus))


def test_a_blocked_request_fails_fast_and_keeps_its_reason() -> None:
    nodes = [make_node(f"n{i}").gpus(8).exclusive(*range(5)) for i in range(3)]
    jobs = [make_job(i).gpus(8).submitted(i) for i in range(50)]
    plan = run_cycle(make_snapshot(nodes, jobs), build_profile(SchedulerConfig()))
    assert not plan.placements
    assert {r.message for reasons in plan.pending.values() for r in reasons} == {
        "needs 8 GPUs; 9 GPUs free in total, but at most 3 on one node (n0)"
    }


def test_many_identical_nodes_fill_by_name_under_binpack_and_spread() -> None:
    nodes = [make_node(f"n{i:03d}").gpus(4) for i in range(200)]
    jobs = [make_job(i).gpus(2).submitted(i) for i in range(6)]
    snapshot = make_snapshot(nodes, jobs)
    binpack = run_cycle(snapshot, build_profile(SchedulerConfig(placement="binpack")))
    spread = run_cycle(snapshot, build_profile(SchedulerConfig(placement="spread")))
    assert [p.node for p in binpack.placements] == ["n000", "n000", "n001", "n001", "n002", "n002"]
    assert [p.node for p in spread.placements] == ["n000", "n001", "n002", "n003", "n004", "n005"]
