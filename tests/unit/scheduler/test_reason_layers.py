"""Every layer of ``PendingReason``, each on a small cluster that produces it.

``EXACT`` and ``LEADING`` hold scenarios, at least one per layer
(``LAYERS``), with the reasons their pending job 1 must give, written
``[layer] message => counterfactual``: all of them (``EXACT``) or the
first (``LEADING``). Then: topology-aware GPU picking,
multi-node gangs (distinct nodes, all or nothing), and regression tests
for the reason bugs these scenarios once exposed (a reservation holding GPUs
against its own job, ETAs for preempting jobs, fragmentation totals,
mixed-constraint and CPU wording).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpudock.config import SchedulerConfig
from gpudock.queue import QueuesConfig
from gpudock.scheduler.snapshot import Plan

from .builders import (
    JobBuilder,
    NodeBuilder,
    RunningBuilder,
    assert_placed,
    gpu_indices,
    make_job,
    make_node,
    make_running,
    make_snapshot,
    placement_of,
    run,
)

LAYERS = {"quota", "fairness", "priority", "gang", "topology", "devices", "constraints", "health"}
ON_STOP = " => starts on their GPUs once they have stopped"
Scenario = Callable[[], Plan]


def case(name: str, scenario: Scenario, *expected: str) -> Any:
    """One scenario and the reasons (``[layer] message => counterfactual``) job 1 gives."""
    return pytest.param(scenario, list(expected), id=name)


def cycle(
    nodes: list[NodeBuilder],
    jobs: list[JobBuilder],
    running: tuple[RunningBuilder, ...] = (),
    config: SchedulerConfig | None = None,
) -> Plan:
    return run(make_snapshot(nodes, jobs, now=1000.0, running=running), config)


def reasons(plan: Plan, job_id: int = 1) -> list[str]:
    """The job's pending reasons as ``[layer] message => counterfactual`` (job not placed)."""
    assert placement_of(plan, job_id) is None, f"job {job_id} was placed"
    assert all(g.job_id != job_id for g in plan.gangs), f"gang {job_id} was placed"
    return [
        f"[{r.layer}] {r.message}" + (f" => {r.counterfactual}" if r.counterfactual else "")
        for r in plan.pending.get(job_id, [])
    ]


def queues(*declared: dict[str, Any]) -> SchedulerConfig:
    return SchedulerConfig(queues=QueuesConfig.model_validate({"queues": list(declared)}))


def busy(*counts: int, gpus: int = 4) -> list[NodeBuilder]:
    """Nodes ``gpu-0``, ``gpu-1``…, each with its first ``counts[i]`` GPUs held whole."""
    return [make_node(f"gpu-{i}").gpus(gpus).exclusive(*range(n)) for i, n in enumerate(counts)]


def nvlink_pairs(name: str) -> NodeBuilder:
    """8 GPUs in four NVLink domains of 2."""
    return make_node(name).gpus(8).topology(nvlink=[[0, 1], [2, 3], [4, 5], [6, 7]])


def nvlink_quads(name: str) -> NodeBuilder:
    """8 GPUs in two NVLink domains of 4 (and two NUMA nodes alike)."""
    halves = [[0, 1, 2, 3], [4, 5, 6, 7]]
    return make_node(name).gpus(8).topology(nvlink=halves, numa=halves)


def n0(gpus: int = 4) -> list[NodeBuilder]:
    return [make_node("n0").gpus(gpus)]


TWO_QUEUES = queues(
    {"name": "vision", "guarantee": {"gpus": 2}}, {"name": "nlp", "guarantee": {"gpus": 2}}
)

EXACT = [  # job 1's reasons, all of them
    case(
        "devices-fragmented",
        lambda: cycle(busy(3, 2, 2), [make_job(1).gpus(4)]),
        "[devices] needs 4 GPUs; 5 GPUs free in total, but at most 2 on one node (gpu-1)"
        " => runs when 2 more GPUs free up on gpu-1",
    ),
    case(
        "devices-shared-memory",
        lambda: cycle(
            [make_node("gpu-0").gpus(2, memory="40GiB").shared(0, "32GiB").shared(1, "35GiB")],
            [make_job(1).gpu_memory("20GiB")],
        ),
        "[devices] needs 20GiB on 1 GPU; the most free on one GPU is 8GiB (node gpu-0)"
        " => runs when 1 more GPU on gpu-0 has 20GiB free",
    ),
    case(
        "devices-too-big-for-every-node",
        lambda: cycle(
            [make_node("gpu-0").gpus(8), make_node("gpu-1").gpus(4)], [make_job(1).gpus(16)]
        ),
        "[devices] needs 16 GPUs; the largest node has 8 (gpu-0)"
        " => needs a node with at least 16 GPUs",
    ),
    case(
        "devices-cpus-busy",
        lambda: cycle(
            [
                make_node("gpu-0").gpus(4).cpus(16, used=12),
                make_node("gpu-1").gpus(4).cpus(16, used=14),
            ],
            [make_job(1).cpus(8)],
        ),
        "[devices] needs 8 CPUs; the most free on one node is 4 (gpu-0)"
        " => runs when 4 more CPUs free up on gpu-0",
    ),
    case(
        "devices-cpus-never",
        lambda: cycle(
            [make_node("gpu-0").gpus(4).cpus(4), make_node("gpu-1").gpus(4).cpus(6)],
            [make_job(1).cpus(8)],
        ),
        "[devices] needs 8 CPUs; the largest node has 6 (gpu-1)"
        " => needs a node with at least 8 CPUs",
    ),
    case(
        "constraints-gpu-model",
        lambda: cycle(
            [make_node("gpu-0").gpus(2, model="T4"), make_node("gpu-1").gpus(1, model="A100-40GB")],
            [make_job(1).model("H100")],
        ),
        "[constraints] no GPU of model H100 on any node (have: A100-40GB, T4)"
        " => runs only once a node with H100 GPUs joins",
    ),
    case(
        "constraints-node-selector",
        lambda: cycle(
            [make_node("gpu-0").gpus(2).label("zone", "us"), make_node("gpu-1").gpus(2)],
            [make_job(1).selector("zone", "eu")],
        ),
        "[constraints] no node matches node selector zone=eu"
        " => label a node zone=eu or change the selector",
    ),
    case(
        "constraints-taints",
        lambda: cycle(
            [
                make_node("gpu-0").gpus(2).taint("dedicated=infra:NoSchedule"),
                make_node("gpu-1").gpus(2).taint("dedicated=infra"),
            ],
            [make_job(1).tolerate("other")],
        ),
        "[constraints] 2 nodes have taints it does not tolerate"
        " (gpu-0: dedicated=infra:NoSchedule; gpu-1: dedicated=infra:NoSchedule)"
        " => add a toleration for dedicated",
    ),
    case(
        "health-one-node",
        lambda: cycle([make_node("gpu-0").gpus(8).unavailable("heartbeat lost")], [make_job(1)]),
        "[health] node gpu-0 unavailable: heartbeat lost => may run when gpu-0 is available again",
    ),
    case(
        "health-several-nodes",
        lambda: cycle(
            [
                make_node("gpu-0").gpus(8).unavailable("heartbeat lost"),
                make_node("gpu-1").unavailable(),
            ],
            [make_job(1)],
        ),
        "[health] 2 nodes unavailable: gpu-0 (heartbeat lost), gpu-1"
        " => may run when one of them is available again",
    ),
    case(
        "health-no-nodes",
        lambda: cycle([], [make_job(1)]),
        "[health] no nodes are registered => runs once a node joins",
    ),
    case(  # 4 GPUs free, 2 in each domain
        "topology-domains-busy",
        lambda: cycle(
            [nvlink_quads("gpu-0").exclusive(0, 1, 4, 5)], [make_job(1).gpus(4).topology("nvlink")]
        ),
        "[topology] needs 4 GPUs in one NVLink domain; the most usable in one NVLink domain is 2"
        " (node gpu-0) => runs when 2 more GPUs free up in one NVLink domain of gpu-0",
    ),
    case(
        "topology-domains-too-small",
        lambda: cycle([nvlink_pairs("gpu-0")], [make_job(1).gpus(4).topology("nvlink")]),
        "[topology] needs 4 GPUs in one NVLink domain; the largest NVLink domain has 2"
        " (node gpu-0) => needs a node with 4 GPUs in one NVLink domain",
    ),
    case(  # ready nodes are listed best first: binpack ranks the fuller gpu-1 first
        "gang-two-of-three-nodes",
        lambda: cycle(busy(0, 1, 3), [make_job(1).gpus(2).nodes(3)]),
        "[gang] needs 3 nodes with 2 GPUs each, all at once;"
        " only 2 can take a part now (gpu-1, gpu-0) => runs when 1 more node has room",
    ),
    case(  # then why each node cannot take a part (one gpu_capacity summary)
        "gang-no-node",
        lambda: cycle(busy(3, 3, 3), [make_job(1).gpus(2).nodes(3)]),
        "[gang] needs 3 nodes with 2 GPUs each, all at once; no node can take a part now"
        " => runs when 3 more nodes have room",
        "[devices] needs 2 GPUs; 3 GPUs free in total, but at most 1 on one node (gpu-0)"
        " => runs when 1 more GPU free up on gpu-0",
    ),
    case(  # job 2 may not preempt; its EASY reservation holds the free GPUs 2 and 3
        "priority-reserved-for-another",
        lambda: cycle(
            n0(),
            [make_job(2).gpus(4).priority(10).cannot_preempt(), make_job(1)],
            running=(make_running(10).on("n0", 0, 1).max_runtime(3600),),
        ),
        "[priority] GPUs 2-3 of n0 are reserved for job 2 (expected to start ≈ 01:00)"
        " => with max_runtime at most 43m20s it could backfill now",
        "[devices] needs 1 GPU; node n0 has 0 free => runs when 1 more GPU free up on n0",
    ),
    case(
        "priority-waiting-for-victims",
        lambda: cycle(
            n0(2),
            [make_job(1).priority(9)],
            running=(make_running(10).on("n0", 0).stopping_for(1), make_running(11).on("n0", 1)),
        ),
        "[priority] waiting for preempted job 10 (priority 0) to stop" + ON_STOP,
        "[devices] needs 1 GPU; node n0 has 0 free => runs when 1 more GPU free up on n0",
    ),
    case(
        "quota-borrowing-disabled",
        lambda: cycle(
            n0(8),
            [make_job(1).queue("nlp")],
            running=(make_running(50).on("n0", 0, 1).queue("nlp"),),
            config=queues({"name": "nlp", "guarantee": {"gpus": 2}, "borrow": False}),
        ),
        "[quota] queue nlp at quota 2/2 GPUs; borrowing disabled"
        " => runs once queue nlp uses at most 1 GPU",
    ),
    case(
        "quota-limit",
        lambda: cycle(
            n0(8),
            [make_job(1).gpus(2).queue("vision")],
            running=(make_running(50).on("n0", 0, 1, 2, 3).queue("vision"),),
            config=queues({"name": "vision", "limit": {"gpus": 4}}),
        ),
        "[quota] queue vision would exceed its limit (4/4 GPUs in use, job needs 2)"
        " => runs once queue vision uses at most 2 GPUs",
    ),
]


def preempting() -> Plan:
    """Job 1 (priority 100) needs 2 of 4 busy GPUs: the youngest two jobs make way."""
    running = tuple(make_running(10 + i).on("n0", i).started(100 * i) for i in range(4))
    return cycle(n0(), [make_job(1).gpus(2).priority(100)], running=running)


LEADING = [  # job 1's first reason
    case(
        "priority-preempting",
        preempting,
        "[priority] preempting jobs 12, 13 (priority 0) on node n0" + ON_STOP,
    ),
    case(
        "fairness-reclaim",
        lambda: cycle(
            n0(),
            [make_job(1).queue("vision")],
            running=tuple(
                make_running(10 + i).on("n0", i).queue("nlp").started(i) for i in range(4)
            ),
            config=TWO_QUEUES,
        ),
        "[fairness] queue vision is under its fair share: reclaiming job 13 (priority 0)"
        " from borrowing queue nlp on node n0" + ON_STOP,
    ),
]


@pytest.mark.parametrize(("scenario", "expected"), EXACT)
def test_the_job_gives_exactly_these_reasons(scenario: Scenario, expected: list[str]) -> None:
    assert reasons(scenario()) == expected


@pytest.mark.parametrize(("scenario", "expected"), LEADING)
def test_the_job_gives_this_reason_first(scenario: Scenario, expected: list[str]) -> None:
    assert reasons(scenario())[:1] == expected


def test_every_layer_has_a_scenario() -> None:
    lines = [line for param in EXACT + LEADING for line in param.values[1]]
    assert {line[1 : line.index("]")] for line in lines} == LAYERS


def test_a_toleration_lets_the_job_onto_a_tainted_node() -> None:
    nodes = [make_node("gpu-0").gpus(2).taint("dedicated=infra:NoSchedule")]
    assert_placed(cycle(nodes, [make_job(1).tolerate("dedicated=infra")]), 1, node="gpu-0")
    assert_placed(cycle(nodes, [make_job(1).tolerate("dedicated")]), 1, node="gpu-0")
    assert placement_of(cycle(nodes, [make_job(1).tolerate("dedicated=web")]), 1) is None


def test_a_selector_picks_the_labelled_node() -> None:
    nodes = [make_node("a").gpus(2), make_node("b").gpus(2).label("zone", "eu")]
    assert_placed(cycle(nodes, [make_job(1).selector("zone", "eu")]), 1, node="b")


def test_the_reserved_job_is_told_its_eta() -> None:
    """Equal priorities, so job 1 cannot preempt: it is next in line until job 10 ends."""
    running = (make_running(10).on("n0", 0, 1).started(0).max_runtime(3600),)
    assert reasons(cycle(n0(), [make_job(1).gpus(4)], running=running))[-1] == (
        "[devices] next in line: GPUs 0-3 of n0 are reserved for it"
        " => expected to start ≈ 01:00, in 43m20s, when job 10 reaches max_runtime"
    )


# topology-aware picking: domains [0-3] and [4-7]


@pytest.mark.parametrize(("gpus", "expected"), [(1, [2]), (2, [2, 3]), (4, [4, 5, 6, 7])])
def test_the_picker_takes_the_tightest_nvlink_domain_that_fits(
    gpus: int, expected: list[int]
) -> None:
    """GPUs 0 and 1 busy: small jobs fill the half-used domain, keeping 4-7 whole."""
    plan = cycle([nvlink_quads("n0").exclusive(0, 1)], [make_job(1).gpus(gpus)])
    assert_placed(plan, 1, node="n0", gpus=expected)


def test_the_picker_spans_domains_only_when_no_domain_fits() -> None:
    plan = cycle([nvlink_quads("n0").exclusive(0, 1)], [make_job(1).gpus(6)])
    assert gpu_indices(assert_placed(plan, 1)) == [4, 5, 6, 7, 2, 3]  # largest domain first


def test_a_required_domain_is_found_on_the_node_that_has_one() -> None:
    nodes = [nvlink_pairs("a"), nvlink_quads("b").exclusive(0)]
    plan = cycle(nodes, [make_job(1).gpus(4).topology("nvlink")])
    assert_placed(plan, 1, node="b", gpus=[4, 5, 6, 7])


# multi-node gangs


def parts(plan: Plan) -> list[tuple[str, list[int]]]:
    (gang,) = plan.gangs
    assert gang.job_id == 1 and plan.placements == [] and 1 not in plan.pending
    return sorted((p.node, gpu_indices(p)) for p in gang.parts)


def test_a_gang_takes_one_part_on_each_of_distinct_nodes() -> None:
    plan = cycle([make_node("a").gpus(8), make_node("b").gpus(8)], [make_job(1).gpus(4).nodes(2)])
    assert parts(plan) == [("a", [0, 1, 2, 3]), ("b", [0, 1, 2, 3])]


def test_a_gang_part_respects_a_topology_requirement() -> None:
    nodes = [nvlink_quads("a").exclusive(0), nvlink_quads("b")]
    plan = cycle(nodes, [make_job(1).gpus(4).nodes(2).topology("nvlink")])
    assert parts(plan) == [("a", [4, 5, 6, 7]), ("b", [0, 1, 2, 3])]


def test_a_gang_is_all_or_nothing() -> None:
    """b cannot take a part: nothing is placed, and a stays whole for the next job."""
    nodes = [make_node("a").gpus(8), make_node("b").gpus(8).exclusive(*range(6))]
    assert reasons(cycle(nodes, [make_job(1).gpus(4).nodes(2)])) == [
        "[gang] needs 2 nodes with 4 GPUs each, all at once; only 1 can take a part now (a)"
        " => runs when 1 more node has room"
    ]
    plan = cycle(nodes, [make_job(1).gpus(4).nodes(2), make_job(2).gpus(8).submitted(1)])
    assert plan.gangs == []
    assert_placed(plan, 2, node="a", gpus=list(range(8)))


# bugs these scenarios exposed: each test asserts the correct behaviour


def test_a_higher_priority_job_preempts_when_some_of_its_gpus_are_free() -> None:
    """Job 10 holds 2 of the 4 GPUs job 1 needs; the other 2 are free."""
    running = (make_running(10).on("n0", 0, 1),)
    plan = cycle(n0(), [make_job(1).gpus(4).priority(100)], running=running)
    assert [(p.victim_id, p.preemptor_id) for p in plan.preemptions] == [(10, 1)]
    assert reasons(plan)[0] == "[priority] preempting job 10 (priority 0) on node n0" + ON_STOP


def test_the_reserved_job_counts_the_gpus_held_for_it_as_free() -> None:
    running = (make_running(10).on("n0", 0, 1).started(0).max_runtime(3600),)
    assert reasons(cycle(n0(), [make_job(1).gpus(4)], running=running))[0] == (
        "[devices] needs 4 GPUs; node n0 has 2 free => runs when 2 more GPUs free up on n0"
    )


def test_a_preemptor_is_not_told_to_wait_for_max_runtime() -> None:
    """It will start on GPUs 2 and 3 once jobs 12 and 13 stop, whatever job 10's runtime."""
    assert [r for r in reasons(preempting()) if "next in line" in r] == []


def test_a_reservation_of_equal_priority_is_not_called_higher_priority() -> None:
    running = (make_running(10).on("n0", 0, 1).max_runtime(3600),)
    jobs = [make_job(2).gpus(4), make_job(1).submitted(1)]  # equal priority, job 2 first
    first = reasons(cycle(n0(), jobs, running=running))[0]
    assert first.startswith("[priority] GPUs 2-3 of n0 are reserved for ")
    assert "job 2" in first and "higher-priority" not in first


def test_fragmentation_counts_only_nodes_that_could_hold_the_job() -> None:
    """small has 3 free GPUs of 3: it can never take 4, yet '7 free in total, at most 2'."""
    nodes = [*busy(6, 6, gpus=8), make_node("small").gpus(3)]
    assert reasons(cycle(nodes, [make_job(1).gpus(4)])) == [
        "[devices] needs 4 GPUs; 4 GPUs free in total, but at most 2 on one node (gpu-0)"
        " => runs when 2 more GPUs free up on gpu-0"
    ]


def test_no_fragmentation_wording_when_the_total_would_not_suffice() -> None:
    assert reasons(cycle(busy(3, 3), [make_job(1).gpus(4)])) == [
        "[devices] needs 4 GPUs; the most free on one node is 1 (gpu-0)"
        " => runs when 3 more GPUs free up on gpu-0"
    ]


def test_one_unmatched_node_is_singular() -> None:
    nodes = [
        make_node("eu").gpus(2).label("zone", "eu").taint("x=y"),
        make_node("us").gpus(2).label("zone", "us"),
    ]
    assert reasons(cycle(nodes, [make_job(1).selector("zone", "eu")])) == [
        "[constraints] 1 node does not match node selector zone=eu, and 1 node has taints"
        " it does not tolerate (eu: x=y:NoSchedule)"
        " => label a node zone=eu or change the selector; or add a toleration for x"
    ]


def test_a_selector_and_a_model_that_rule_out_every_node_are_constraints() -> None:
    """eu has no H100, the H100 node is not in eu: it can never run, for constraints."""
    nodes = [
        make_node("eu").gpus(2, model="A100-80GB").label("zone", "eu"),
        make_node("us").gpus(2, model="H100").label("zone", "us"),
    ]
    (only,) = reasons(cycle(nodes, [make_job(1).selector("zone", "eu").model("H100")]))
    assert only.startswith("[constraints] ") and "zone=eu" in only and "H100" in only
    assert " => " in only


def test_cpus_are_not_blamed_when_a_node_has_enough() -> None:
    """a has 4 CPUs in all; b has 32 but its GPUs are busy: only the GPUs explain the wait."""
    nodes = [make_node("a").gpus(4).cpus(4), make_node("b").gpus(4).cpus(32).exclusive(0, 1, 2)]
    shown = reasons(cycle(nodes, [make_job(1).gpus(2).cpus(8)]))
    assert not any(r.endswith("needs a node with at least 8 CPUs") for r in shown)
    assert "[devices] needs 2 GPUs; node b has 1 free => runs when 1 more GPU free up on b" in shown
