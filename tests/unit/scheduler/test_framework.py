"""The framework's mechanism: registry, profile, status codes, capacity model."""

from __future__ import annotations

import pkgutil
from collections.abc import Sequence
from dataclasses import replace

import pytest

import gpudock.scheduler.policies as policies_pkg
from gpudock.config import SchedulerConfig
from gpudock.core.job import PendingReason
from gpudock.scheduler.capacity import CycleState, NodeState, ReservationError
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.framework import SUCCESS, Rejection, Status, StatusCode
from gpudock.scheduler.registry import REGISTRY, ProfileSpec, build_profile, profile_spec
from gpudock.scheduler.snapshot import JobRequest

from .builders import make_job, make_node, make_snapshot, run


def test_every_policy_module_is_registered() -> None:
    modules = {m.name for m in pkgutil.iter_modules(policies_pkg.__path__)}
    assert modules == {
        "priority_fifo",
        "node_health",
        "gpu_model",
        "gpu_capacity",
        "binpack",
        "spread",
        "gpu_picker",
        "node_affinity",
        "cpu_capacity",
        "memory_capacity",
        "gpu_topology",
        "gpu_sharing",
        "cuda_compat",
        "gpu_health",
        "mig_capacity",
        "fgd",
        "fgd_adaptive",
        "share_price",  # a plugin folder
    }
    assert set(REGISTRY) == {
        "priority_fifo",
        "node_health",
        "gpu_model",
        "gpu_capacity",
        "binpack",
        "spread",
        "best_fit",
        "node_affinity",
        "cpu_capacity",
        "memory_capacity",
        "gpu_topology",
        "gpu_sharing",
        "cuda_compat",
        "gpu_health",
        "mig_capacity",
        "fgd",
        "fgd_picker",
        "fgd_adaptive",
        "fgd_adaptive_picker",
        "share_price",
        "learn_workload",
    }


@pytest.mark.parametrize("placement", ["binpack", "spread"])
def test_the_config_chooses_the_score_policy(placement: str) -> None:
    profile = build_profile(SchedulerConfig(placement=placement))  # type: ignore[arg-type]
    assert [p.name for p, _ in profile.scorers] == [placement]
    assert [f.name for f in profile.filters] == [
        "node_affinity",
        "gpu_model",
        "gpu_sharing",
        "cuda_compat",
        "node_health",
        "gpu_health",
        "cpu_capacity",
        "memory_capacity",
        "gpu_capacity",
        "gpu_topology",
        "mig_capacity",
    ]


def test_an_unknown_policy_name_is_a_clear_error() -> None:
    spec = profile_spec(SchedulerConfig())
    bad = ProfileSpec(order=spec.order, filters=("nope",), scorers=spec.scorers, picker=spec.picker)
    with pytest.raises(ValueError, match="unknown filter policy 'nope'"):
        build_profile(SchedulerConfig(), bad)


def test_status_helpers() -> None:
    status = Status.unresolvable("constraints", "no H100")
    assert status.code is StatusCode.UNRESOLVABLE and not status.ok
    assert Status(StatusCode.SUCCESS).ok


class CountingFilter:
    """Counts filter calls; passes every node."""

    name = "counting"
    layer = "devices"

    def __init__(self) -> None:
        self.calls = 0

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        self.calls += 1
        return SUCCESS

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        return None


def test_equal_requests_share_verdicts_and_only_changed_nodes_are_re_evaluated() -> None:
    counting = CountingFilter()
    base = build_profile(SchedulerConfig())
    profile = replace(base, filters=(counting, *base.filters))
    nodes = [make_node(f"n{i:03}").gpus(8) for i in range(100)]
    jobs = [make_job(i).submitted(i) for i in range(50)]
    plan = run_cycle(make_snapshot(nodes, jobs), profile, index=False)  # the generic path
    assert len(plan.placements) == 50
    # 100 nodes once for the first job, then the one node each reservation changed
    assert counting.calls == 100 + 49


def test_the_capacity_index_runs_an_unknown_filter_only_on_its_candidates() -> None:
    counting = CountingFilter()
    base = build_profile(SchedulerConfig())
    profile = replace(base, filters=(counting, *base.filters))
    nodes = [make_node(f"n{i:03}").gpus(8) for i in range(100)]
    jobs = [make_job(i).submitted(i) for i in range(50)]
    plan = run_cycle(make_snapshot(nodes, jobs), profile)
    assert len(plan.placements) == 50
    # the best node for each job, once: the reservation changed it for the next
    assert counting.calls == 50


def test_a_bad_reservation_changes_nothing() -> None:
    snapshot = make_snapshot([make_node("n0").gpus(2).exclusive(0)], [])
    state = CycleState(snapshot.nodes)
    for indices in ([0], [1, 1], [5]):
        with pytest.raises(ReservationError):
            state.reserve(make_job(1).build(), "n0", indices)
    assert state.nodes["n0"].idle_gpus == 1


def test_the_snapshot_is_never_mutated_and_plans_repeat() -> None:
    snapshot = make_snapshot(
        [make_node("n0").gpus(2), make_node("n1").gpus(2).shared(0, "10GiB")],
        [make_job(i).gpu_memory("30GiB").submitted(i) for i in range(5)],
    )
    before = repr(snapshot)
    assert run(snapshot) == run(snapshot)
    assert repr(snapshot) == before


def test_duplicate_node_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="twice"):
        CycleState([make_node("n0").build(), make_node("n0").build()])


def test_the_config_picks_policies_and_weights() -> None:
    from gpudock.config import SchedulerConfig
    from gpudock.scheduler.registry import build_profile

    config = SchedulerConfig.model_validate(
        {
            "policies": {
                "filters": ["node_health", "gpu_model", "gpu_capacity"],
                "scorers": [{"name": "spread", "weight": 2}, {"name": "binpack", "weight": 0.5}],
            }
        }
    )
    profile = build_profile(config)
    assert [f.name for f in profile.filters] == ["node_health", "gpu_model", "gpu_capacity"]
    assert [(s.name, w) for s, w in profile.scorers] == [("spread", 2.0), ("binpack", 0.5)]


def test_unknown_or_unsafe_policy_names_are_refused() -> None:
    import pytest

    from gpudock.config import SchedulerConfig
    from gpudock.scheduler.registry import build_profile

    bad = SchedulerConfig.model_validate({"policies": {"scorers": [{"name": "tetris"}]}})
    with pytest.raises(
        ValueError,
        match="unknown score policy 'tetris' \\(known: binpack, fgd, fgd_adaptive, spread\\)",
    ):
        build_profile(bad)
    unsafe = SchedulerConfig.model_validate({"policies": {"filters": ["gpu_model"]}})
    with pytest.raises(ValueError, match="gpu_capacity filter is required"):
        build_profile(unsafe)


def test_score_policy_options_come_from_the_config() -> None:
    from gpudock.config import SchedulerConfig
    from gpudock.scheduler.policies.binpack import Binpack
    from gpudock.scheduler.registry import build_profile

    def built(options: dict[str, object]) -> Binpack:
        config = SchedulerConfig.model_validate(
            {"policies": {"scorers": [{"name": "binpack", "options": options}]}}
        )
        scorer = build_profile(config).scorers[0][0]
        assert isinstance(scorer, Binpack)
        return scorer

    assert built({}).cpu_aware is True
    assert built({"cpu_aware": False}).cpu_aware is False


def test_binpack_without_its_cpu_rule_fills_the_node_whose_cpus_run_out() -> None:
    from gpudock.scheduler.cycle import schedule

    # n0 has 3 idle GPUs but CPUs for only one job like this; n1 has 4 and CPUs for all.
    nodes = [
        make_node("n0").gpus(4).exclusive(0).cpus(16, used=8),
        make_node("n1").gpus(4).cpus(64),
    ]
    snapshot = make_snapshot(nodes, [make_job(1).gpus(1).cpus(8)])

    def placed_on(options: dict[str, object]) -> str:
        config = SchedulerConfig.model_validate(
            {"policies": {"scorers": [{"name": "binpack", "options": options}]}}
        )
        (placement,) = schedule(snapshot, config).placements
        return placement.node

    assert placed_on({}) == "n1"  # n0 would strand 2 GPUs behind its exhausted CPUs
    assert placed_on({"cpu_aware": False}) == "n0"  # plain best fit: the fuller node


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        (
            "binpack",
            {"cpu": True},
            "'binpack' has no option 'cpu' (options: cpu_aware, price_shares)",
        ),
        ("spread", {"cpu_aware": True}, "'spread' has no option 'cpu_aware' (options: none)"),
        ("binpack", {"cpu_aware": "no"}, "'binpack' option 'cpu_aware' takes a bool, got 'no'"),
        ("binpack", {"cpu_aware": 1}, "'binpack' option 'cpu_aware' takes a bool, got 1"),
        ("fgd", {"workload": "x"}, "'fgd' has no option 'workload' (options: none)"),
    ],
)
def test_unknown_or_mistyped_score_policy_options_are_refused(
    name: str, options: dict[str, object], message: str
) -> None:
    from gpudock.config import SchedulerConfig
    from gpudock.scheduler.registry import build_profile

    config = SchedulerConfig.model_validate(
        {"policies": {"scorers": [{"name": name, "options": options}]}}
    )
    with pytest.raises(ValueError) as raised:
        build_profile(config)
    assert str(raised.value) == f"score policy {message}"
