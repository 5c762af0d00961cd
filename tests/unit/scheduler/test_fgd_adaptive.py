"""FGD with CPU-limited fragments and a learned workload (``fgd_adaptive``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpudock.config import PoliciesConfig, SchedulerConfig, ScorerWeight
from gpudock.scheduler import workload as model
from gpudock.scheduler.capacity import CycleState, NodeState
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.framework import PluginState, Profile
from gpudock.scheduler.policies.fgd import Fgd, FgdPicker, summarize
from gpudock.scheduler.policies.fgd_adaptive import (
    MIN_JOBS,
    AdaptiveFgd,
    AdaptiveFgdPicker,
    LearnedFgd,
    LearnWorkload,
    WorkloadLearner,
)
from gpudock.scheduler.policies.share_price import fragmentation
from gpudock.scheduler.policies.share_price.fragmentation import PricedFragmentation
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import NodeView
from gpudock.scheduler.workload import (
    DEFAULT_WORKLOAD,
    CpuLimitedFragmentation,
    Fragmentation,
    TaskType,
    Workload,
)

from .builders import make_job, make_node, make_snapshot


def state_of(view: NodeView) -> NodeState:
    return NodeState.from_view(view)


def adaptive_profile() -> Profile:
    config = SchedulerConfig(
        policies=PoliciesConfig(
            scorers=[ScorerWeight(name="fgd_adaptive")], picker="fgd_adaptive_picker"
        )
    )
    return build_profile(config)


def measure_profile(frag: Fragmentation) -> Profile:
    """``fgd`` + ``fgd_picker`` scoring with ``frag``."""
    base = build_profile(
        SchedulerConfig(
            policies=PoliciesConfig(scorers=[ScorerWeight(name="fgd")], picker="fgd_picker")
        )
    )
    return replace(base, scorers=((Fgd(frag), 1.0),), picker=FgdPicker(frag))


def f_n(workload: Workload, view: NodeView) -> float:
    """The fragments part of ``F_n`` (``sum_t p_t F_n(t)``), stranded GPUs left out."""
    return CpuLimitedFragmentation(workload).parts(summarize(state_of(view)))[0]


def stranded(workload: Workload, view: NodeView) -> float:
    return CpuLimitedFragmentation(workload).parts(summarize(state_of(view)))[1]


# ── the CPU-limited measure ───────────────────────────────────────────────


def test_gpus_beyond_what_the_free_cpus_can_serve_are_fragments() -> None:
    # 8 idle GPUs, 24 CPUs free: two 12-CPU tasks fit, 6 GPUs can never be used by this type.
    node = make_node("n").gpus(8).cpus(96, used=72).build()
    workload = [(TaskType(1, cpus=12), 1.0)]
    assert f_n(workload, node) == pytest.approx(6)
    # FGD's own measure counts nothing until not even one task fits.
    assert Fragmentation(workload).of(summarize(state_of(node))) == 0


def test_shares_beyond_what_the_free_cpus_can_serve_are_fragments() -> None:
    # Two idle GPUs hold four 0.5 shares, but 4 free CPUs allow one 4-CPU share.
    node = make_node("n").gpus(2).cpus(16, used=12).build()
    assert f_n([(TaskType(0.5, cpus=4), 1.0)], node) == pytest.approx(2 - 0.5)
    # With CPUs for all four, only GPUs with too little free count (FGD's rule): none here.
    roomy = make_node("m").gpus(2).cpus(16).build()
    assert f_n([(TaskType(0.5, cpus=4), 1.0)], roomy) == 0


def test_a_task_the_cpus_cannot_serve_once_fragments_all_free_gpus() -> None:
    node = make_node("n").gpus(2).shared(0, "40GiB").cpus(16, used=10).build()
    assert f_n([(TaskType(0.25, cpus=8), 1.0)], node) == pytest.approx(1.5)


def test_f_n_is_the_fragments_plus_the_stranded_gpus_weighted() -> None:
    node = make_node("n").gpus(8).cpus(96, used=72).build()
    workload = [(TaskType(1, cpus=12), 3.0), (TaskType(0.5, cpus=2), 1.0)]
    frag = CpuLimitedFragmentation(workload)
    fragments, lost = frag.parts(summarize(state_of(node)))
    assert frag.of(summarize(state_of(node))) == pytest.approx(
        fragments + model.STRANDED_WEIGHT * lost
    )


# ── GPUs stranded by CPUs ─────────────────────────────────────────────────


def test_gpus_the_common_types_could_use_but_the_free_cpus_cannot_serve_are_stranded() -> None:
    # 24 free CPUs serve two 12-CPU tasks: 6 of the 8 idle GPUs are stranded.
    node = make_node("n").gpus(8).cpus(96, used=72).build()
    assert stranded([(TaskType(1, cpus=12), 1.0)], node) == pytest.approx(6)
    # The best-served common type decides: a 3-CPU type could use every GPU.
    both = [(TaskType(1, cpus=12), 1.0), (TaskType(1, cpus=3), 1.0)]
    assert stranded(both, node) == 0
    assert stranded([(TaskType(1, cpus=12), 1.0)], make_node("m").gpus(8).cpus(96).build()) == 0


def test_gpu_capacity_too_small_for_the_types_is_not_stranded_by_cpus() -> None:
    # 20 GiB free of 80: no 0.5 share fits, CPUs or not; FGD's fragment, not stranded.
    node = make_node("n").gpus(1).shared(0, "60GiB").cpus(16, used=15).build()
    assert stranded([(TaskType(0.5, cpus=4), 1.0)], node) == 0
    assert f_n([(TaskType(0.5, cpus=4), 1.0)], node) == pytest.approx(0.25)


def test_rare_types_do_not_keep_stranded_gpus_alive() -> None:
    node = make_node("n").gpus(8).cpus(96, used=72).build()
    rare = [(TaskType(1, cpus=12), 1000.0), (TaskType(1, cpus=1), 1.0)]  # under COMMON
    assert stranded(rare, node) == pytest.approx(6)
    common = [(TaskType(1, cpus=12), 90.0), (TaskType(1, cpus=1), 10.0)]
    assert stranded(common, node) == 0


def test_a_job_goes_where_it_strands_no_gpus_even_if_fgd_prefers_the_other_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # "a-small" can never serve the popular 16-CPU type, so FGD already counts its GPU
    # as fragment and filling it *lowers* F_n; but the half GPU left behind 2 CPUs is
    # lost to every type, while "b-roomy" keeps CPUs for all it has left.
    workload = [(TaskType(1, cpus=16), 2.0), (TaskType(0.5, cpus=4), 1.0)]
    small = make_node("a-small").gpus(1).cpus(12).build()
    roomy = make_node("b-roomy").gpus(2).cpus(40).build()
    job = make_job(1).gpu_memory("40GiB").cpus(10).build()
    snapshot = make_snapshot([small, roomy], [job])
    plan = run_cycle(snapshot, measure_profile(CpuLimitedFragmentation(workload)))
    assert plan.placements[0].node == "b-roomy"
    monkeypatch.setattr(model, "STRANDED_WEIGHT", 0.0)  # the fragments alone
    plan = run_cycle(snapshot, measure_profile(CpuLimitedFragmentation(workload)))
    assert plan.placements[0].node == "a-small"


def test_without_cpu_limits_the_measure_is_fgds() -> None:
    node = make_node("n").gpus(4).shared(0, "40GiB").exclusive(1).build()  # no CPU counting
    for workload in (DEFAULT_WORKLOAD, [(TaskType(0.75, cpus=2), 1.0), (TaskType(2, cpus=4), 3)]):
        summary = summarize(state_of(node))
        assert CpuLimitedFragmentation(workload).of(summary) == pytest.approx(
            Fragmentation(workload).of(summary)
        )


def test_cpu_heavy_jobs_go_where_cpus_are_plentiful_for_the_gpus_left() -> None:
    workload = [(TaskType(1, cpus=11), 1.0)]
    tight = make_node("a-tight").gpus(8).cpus(96).build()  # 12 CPUs per GPU
    roomy = make_node("b-roomy").gpus(8).cpus(200).build()
    job = make_job(1).gpus(0).cpus(32).build()
    snapshot = make_snapshot([tight, roomy], [job])
    plan = run_cycle(snapshot, measure_profile(CpuLimitedFragmentation(workload)))
    assert plan.placements[0].node == "b-roomy"
    # FGD sees no rise on either (an 11-CPU task still fits) and takes the first name.
    plan = run_cycle(snapshot, measure_profile(Fragmentation(workload)))
    assert plan.placements[0].node == "a-tight"


# ── shares priced by the cutting-stock LP ─────────────────────────────────

PAIRS: Workload = [(TaskType(0.47), 4.0), (TaskType(0.32), 2.0), (TaskType(0.68), 1.0)]
"""0.68 + 0.32 fill a GPU and two 0.47s nearly do: priced 2/3, 1/3 and 1/2 (test_share_prices)."""


def test_a_share_leaves_a_gap_to_the_size_that_fills_it_better() -> None:
    # GPU 0 holds a 0.47: its 0.53 is best kept for another 0.47. A 0.32 there would leave
    # 0.21 that no priced share fits; on the idle GPU it leaves 0.68, worth what it cost.
    node = make_node("n").gpus(2, memory="100GiB").shared(0, "47GiB").cpus(32).build()
    job = make_job(1).gpu_memory("32GiB").cpus(2).build()
    snapshot = make_snapshot([node], [job])
    workload = [*PAIRS, (TaskType(1), 10.0)]  # mostly whole-GPU jobs
    plan = run_cycle(snapshot, measure_profile(PricedFragmentation(workload)))
    assert plan.placements[0].gpu_uuids == (node.gpus[1].uuid,)
    # Best fit takes the gap. So does FGD's own measure: for the popular whole-GPU type the
    # 0.68 left on a GPU no longer idle would be a fragment, the 0.21 counts less.
    for profile in (build_profile(SchedulerConfig()), measure_profile(Fragmentation(workload))):
        assert run_cycle(snapshot, profile).placements[0].gpu_uuids == (node.gpus[0].uuid,)


def test_a_share_the_gap_suits_fills_it() -> None:
    node = make_node("n").gpus(2, memory="100GiB").shared(0, "47GiB").cpus(32).build()
    job = make_job(1).gpu_memory("47GiB").cpus(2).build()
    plan = run_cycle(make_snapshot([node], [job]), measure_profile(PricedFragmentation(PAIRS)))
    assert plan.placements[0].gpu_uuids == (node.gpus[0].uuid,)


def test_the_priced_measure_adds_the_worth_lost_between_stranded_gpus_and_fragments() -> None:
    view = make_node("n").gpus(2, memory="100GiB").shared(0, "47GiB").cpus(4).build()
    summary = summarize(state_of(view))  # free (530, 1000); 4 CPUs
    workload = [(replace(t, cpus=8), p) for t, p in [*PAIRS, (TaskType(1), 1.0)]]
    measure = PricedFragmentation(workload)
    fragments, strand = measure.parts(summary)
    assert strand == pytest.approx(1.53)  # every type could use the GPUs, none with 4 CPUs
    worth = 0.5 + 1.0  # value(530) + value(1000)
    assert measure.of(summary) == pytest.approx(
        model.STRANDED_WEIGHT * strand - worth + fragmentation.FRAGMENT_WEIGHT * fragments
    )


def test_whole_gpu_jobs_go_where_the_cpu_limited_measure_sends_them() -> None:
    # An idle GPU is worth 1 on every node, so taking k of them loses k everywhere; what
    # decides is stranded capacity, then FGD's fragments, as without prices.
    nodes = [
        make_node("a").gpus(4, memory="100GiB").shared(0, "47GiB").cpus(64).build(),
        make_node("b").gpus(4, memory="100GiB").cpus(64).build(),
        make_node("c").gpus(4, memory="100GiB").cpus(20).build(),
    ]
    workload = [*PAIRS, (TaskType(2, cpus=8), 2.0)]
    snapshot = make_snapshot(nodes, [make_job(1).gpus(2).cpus(16).build()])
    chosen = {
        run_cycle(snapshot, measure_profile(measure)).placements[0].node
        for measure in (PricedFragmentation(workload), CpuLimitedFragmentation(workload))
    }
    # c would strand its last 2 GPUs behind 4 CPUs. On a and b the 2-GPU type loses nothing
    # (a's odd idle GPU was a fragment already), and a is left the fullest.
    assert chosen == {"a"}


# ── the learned workload ──────────────────────────────────────────────────


GiB80 = 80 * 2**30


def test_the_workload_is_the_gpu_jobs_seen_each_counted_once() -> None:
    learner = WorkloadLearner()
    learner.observe(make_job(1).gpu_memory("20GiB").cpus(3).build(), GiB80)
    learner.observe(make_job(1).gpu_memory("20GiB").cpus(3).build(), GiB80)  # same id
    learner.observe(make_job(2).gpus(2).cpus(8).build(), GiB80)
    learner.observe(make_job(3).gpus(2).cpus(8).build(), GiB80)
    learner.observe(make_job(4).gpus(0).cpus(8).build(), GiB80)  # CPU-only: not a task type
    assert learner.workload() == [(TaskType(2, cpus=8), 2.0), (TaskType(0.25, cpus=3), 1.0)]


def test_the_default_workload_is_used_until_enough_jobs_are_seen() -> None:
    learner = WorkloadLearner()
    first = learner.learned
    for i in range(MIN_JOBS - 1):
        learner.observe(make_job(i).gpus(1).cpus(12).build(), GiB80)
    assert learner.learned is first
    learner.observe(make_job(MIN_JOBS).gpus(1).cpus(12).build(), GiB80)
    assert learner.learned is not first
    # The learned type asks 12 CPUs per GPU: 72 CPUs serve only 6 of 8 idle GPUs.
    busy = state_of(make_node("m").gpus(8).cpus(96, used=24).build())
    measure = learner.learned.scorer.measure
    assert isinstance(measure, PricedFragmentation)
    assert measure.parts(summarize(busy)) == pytest.approx((2, 2))


def test_scorer_and_picker_read_one_learned_workload_kept_in_the_session() -> None:
    profile = adaptive_profile()
    assert isinstance(profile.scorers[0][0], AdaptiveFgd)
    assert isinstance(profile.picker, AdaptiveFgdPicker)
    assert "learn_workload" in [p.name for p in profile.pre_scorers]
    jobs = [make_job(i).gpus(1).cpus(12).build() for i in range(MIN_JOBS)]
    snapshot = make_snapshot([make_node("n").gpus(8).cpus(96)], jobs)
    kept = PluginState(learn=True)
    state = CycleState(snapshot.nodes)
    LearnWorkload().pre_score(snapshot, profile, state, kept)
    learned = state.read(LearnedFgd)
    assert learned is kept.get(WorkloadLearner).learned  # the session's learner, rebuilt once
    assert learned.scorer.measure is learned.picker._frag
    # a session that does not learn starts each cycle afresh; a cycle with no reader, nothing
    fresh = CycleState(snapshot.nodes)
    LearnWorkload().pre_score(snapshot, profile, fresh, PluginState())
    assert fresh.read(LearnedFgd) is not learned
    binpack = CycleState(snapshot.nodes)
    LearnWorkload().pre_score(snapshot, build_profile(SchedulerConfig()), binpack, kept)
    assert binpack.read(LearnedFgd) is None
    kept_attrs = {k for k in vars(AdaptiveFgd) if not k.startswith("__")}
    assert kept_attrs == {"name", "reads", "score"}  # nothing learned lives in the policy


def test_a_half_gpu_share_fills_the_half_used_gpu() -> None:
    node = make_node("n").gpus(2).shared(1, "40GiB").cpus(32).build()
    job = make_job(1).gpu_memory("40GiB").cpus(2).build()
    plan = run_cycle(make_snapshot([node], [job]), adaptive_profile())
    assert plan.placements[0].gpu_uuids == (node.gpus[1].uuid,)
