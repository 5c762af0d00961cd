"""binpack places one-GPU shares by the job mix's share prices (``policies/share_price/``)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gpudock.config import PoliciesConfig, SchedulerConfig, ScorerWeight
from gpudock.scheduler.accel.priced_shares import PricedShares
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.node_fit import NodeFit
from gpudock.scheduler.policies.share_price.mix import MixTracker, job_mix
from gpudock.scheduler.policies.share_price.pricing import pricing_for
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import Snapshot

from .builders import make_job, make_node, make_running, make_snapshot

MiB = 2**20
MIX = ((1, 470 * MiB, None, 40), (1, 320 * MiB, None, 20), (1, 680 * MiB, None, 10))
"""Shares of 0.47, 0.32 and 0.68 of a 1000 MiB GPU, priced at 1/2, 1/3 and 2/3."""
PRICED = SchedulerConfig(
    policies=PoliciesConfig(scorers=[ScorerWeight(name="binpack", options={"price_shares": True})])
)
"""``binpack`` with its share prices (the default, named)."""
UNPRICED = SchedulerConfig(
    policies=PoliciesConfig(scorers=[ScorerWeight(name="binpack", options={"price_shares": False})])
)
"""``binpack`` with its share prices off: plain best fit for shares without CPUs."""


def _gpu_behind_a_047_share_and_an_idle_one(name: str = "n0"):  # type: ignore[no-untyped-def]
    return make_node(name).gpus(2, memory="1000MiB").shared(0, used="470MiB")


def _placed(snapshot: Snapshot, config: SchedulerConfig | None = None) -> tuple[str, int]:
    profile = build_profile(config or PRICED)
    plans = [run_cycle(snapshot, profile), run_cycle(snapshot, profile, index=False)]
    assert plans[0].placements == plans[1].placements, "the index answers as the generic path"
    (placement,) = plans[0].placements
    return placement.node, int(placement.gpu_uuids[0].rsplit("-", 1)[1])


def test_a_share_that_would_spoil_a_gap_takes_an_idle_gpu_instead() -> None:
    # best fit puts the 0.32 behind the 0.47 (0.21 left, that no share of the mix fits);
    # at the mix's prices that gap is worth 1/6 more than the 0.53 it spoils
    snapshot = replace(
        make_snapshot(
            [_gpu_behind_a_047_share_and_an_idle_one()], [make_job(1).gpu_memory("320MiB")]
        ),
        workload=MIX,
    )
    assert _placed(snapshot) == ("n0", 1)
    assert _placed(snapshot, SchedulerConfig()) == ("n0", 1)  # the default prices shares
    assert _placed(snapshot, UNPRICED) == ("n0", 0)  # without: plain best fit


def test_a_share_that_fills_the_gap_goes_there() -> None:
    snapshot = replace(
        make_snapshot(
            [_gpu_behind_a_047_share_and_an_idle_one()], [make_job(1).gpu_memory("470MiB")]
        ),
        workload=MIX,
    )
    assert _placed(snapshot) == ("n0", 0)


def test_nodes_are_compared_by_the_loss_before_the_capacity_left() -> None:
    # n0 is fuller (best fit's choice) but only offers the gap behind a 0.47
    nodes = [
        _gpu_behind_a_047_share_and_an_idle_one("n0").shared(1, used="900MiB"),
        make_node("n1").gpus(2, memory="1000MiB"),
    ]
    snapshot = replace(make_snapshot(nodes, [make_job(1).gpu_memory("320MiB")]), workload=MIX)
    assert _placed(snapshot) == ("n1", 0)


def test_without_a_workload_the_mix_is_the_running_and_pending_jobs() -> None:
    node = make_node("n0").gpus(4, memory="1000MiB")
    running = [
        make_running(10).on("n0", 0).share("470MiB"),
        make_running(11).on("n0", 1).share("320MiB"),
    ]
    snapshot = make_snapshot(
        [node], [make_job(1).gpu_memory("680MiB"), make_job(2).gpus(1)], running=running
    )
    assert sorted(job_mix(snapshot), key=str) == sorted(
        [
            (1, 470 * MiB, None, 1),
            (1, 320 * MiB, None, 1),
            (1, 680 * MiB, None, 1),
            (1, None, None, 1),
        ],
        key=str,
    )
    assert job_mix(replace(snapshot, workload=MIX)) == list(MIX)


def test_prices_are_memoized_on_the_rounded_mix() -> None:
    node = make_node("n0").gpus(2, memory="1000MiB")
    one = replace(make_snapshot([node], []), workload=MIX)
    # twice the jobs, and one more 0.68: the same proportions to within a rounding step
    drifted = replace(
        one, workload=((1, 470 * MiB, None, 80), (1, 320 * MiB, None, 40), (1, 680 * MiB, None, 21))
    )
    assert pricing_for(one) is pricing_for(drifted)
    assert pricing_for(
        replace(one, workload=((1, 470 * MiB, None, 160), *MIX[1:]))
    ) is not pricing_for(one)
    assert pricing_for(replace(one, workload=((2, None, None, 5),))) is None  # no share: no prices


def test_a_share_asking_for_cpus_goes_first_where_it_strands_nothing() -> None:
    # n0's gap takes the 0.32 with no loss but its last 4 CPUs: the idle GPU beside it
    # would be stranded for the mix (every shape asks for 4 CPUs)
    mix = tuple((gpus, memory, 4.0, n) for gpus, memory, _, n in MIX)
    nodes = [
        make_node("n0").gpus(2, memory="1000MiB").shared(0, used="680MiB").cpus(8, used=4),
        make_node("n1").gpus(2, memory="1000MiB").shared(0, used="680MiB").cpus(16, used=4),
    ]
    snapshot = replace(
        make_snapshot(nodes, [make_job(1).gpu_memory("320MiB").cpus(4)]), workload=mix
    )
    assert _placed(snapshot) == ("n1", 0)


def test_the_tracker_keeps_the_mix_until_it_drifts_or_doubles() -> None:
    tracker = MixTracker(drift=0.1, growth=2.0)
    first = [(1, 470 * MiB, None, 50), (1, None, None, 50)]
    assert tracker.workload(first) == tuple(first)
    nearly = [(1, 470 * MiB, None, 54), (1, None, None, 50)]  # proportions moved by 0.02
    assert tracker.workload(nearly) == tuple(first)
    moved = [(1, 470 * MiB, None, 80), (1, None, None, 50)]  # by 0.115
    assert tracker.workload(moved) == tuple(moved)
    grown = [(1, 470 * MiB, None, 160), (1, None, None, 100)]  # the same, twice the jobs
    assert tracker.workload(grown) == tuple(grown)
    assert tracker.publications == 3


def test_the_tracker_counts_the_mix_only_when_a_one_gpu_share_waits() -> None:
    node = make_node("n0").gpus(2, memory="1000MiB")
    running = [make_running(10).on("n0", 0).share("470MiB")]
    whole = make_snapshot([node], [make_job(1).gpus(1)], running=running)
    tracker = MixTracker()
    assert tracker.apply(whole) is whole
    shared = make_snapshot([node], [make_job(2).gpu_memory("320MiB")], running=running)
    assert sorted(tracker.apply(shared).workload or ()) == sorted(job_mix(shared))
    assert tracker.apply(replace(shared, workload=MIX)).workload == MIX  # the caller's own


@pytest.mark.parametrize("seed", range(12))
def test_the_index_places_priced_shares_as_the_generic_path_does(seed: int) -> None:
    # crowded nodes of two GPU models, partly used GPUs and CPUs; shares with and without
    # CPUs and a model, among whole-GPU jobs: every placement, in order, must agree
    rnd = random.Random(seed)
    nodes = []
    for i in range(rnd.randint(3, 12)):
        model = rnd.choice(["A100-80GB", "H100"])
        node = make_node(f"n{i}").gpus(rnd.choice([1, 2, 4]), model=model, memory="1000MiB")
        for g in range(len(node.build().gpus)):
            if rnd.random() < 0.5:
                node.shared(g, used=f"{rnd.choice([160, 320, 470, 530, 680, 810])}MiB")
        if rnd.random() < 0.7:
            total = rnd.choice([4, 8, 16, 32])
            node.cpus(total, used=rnd.randint(0, total))
        nodes.append(node)
    jobs = []
    for j in range(1, rnd.randint(10, 40)):
        job = make_job(j)
        if rnd.random() < 0.8:
            job.gpu_memory(f"{rnd.choice([160, 230, 320, 470, 650, 810])}MiB")
        else:
            job.gpus(rnd.choice([1, 2]))
        if rnd.random() < 0.6:
            job.cpus(rnd.choice([1, 2, 4, 8]))
        if rnd.random() < 0.2:
            job.model("H100")
        jobs.append(job)
    snapshot = make_snapshot(nodes, jobs)
    profile = build_profile(PRICED)
    indexed = run_cycle(snapshot, profile)
    assert indexed.placements == run_cycle(snapshot, profile, index=False).placements
    assert any(p.memory_per_gpu for p in indexed.placements), "some share was placed"


def test_priced_shares_heads_stay_true_and_the_heaps_bounded_as_members_move() -> None:
    # Members move at random (shares taken and freed, as reservations and a long-lived
    # index's catch-ups do); each key's head must be the least (free_all, name) of the
    # members under it now, and untrue entries must not pile up.
    rnd = random.Random(7)
    size = 80
    names = [f"n{i}" for i in range(40)]

    def fit(frees: list[int]) -> NodeFit:
        shares = tuple((size, f) for f in frees)
        ordered = tuple(sorted(frees, reverse=True))
        return NodeFit(len(frees), frees.count(size), ordered, (size,) * len(frees),
                       frees.count(size), sum(frees), None, shares)  # fmt: skip

    state = {name: [rnd.choice([0, 20, 40, 80]) for _ in range(4)] for name in names}
    fits = {name: fit(frees) for name, frees in state.items()}
    shares = PricedShares(fits)
    for _ in range(3000):
        name = rnd.choice(names)
        state[name][rnd.randrange(4)] = rnd.choice([0, 10, 20, 30, 40, 60, 80])
        fits[name] = fit(state[name])
        shares.dirty.add(name)
        shares.read(fits)
        expected: dict[tuple[int, int], tuple[int, str]] = {}
        for member, frees in state.items():
            for key in {(size, f) for f in frees}:
                entry = (sum(frees), member)
                expected[key] = min(expected.get(key, entry), entry)
        logged = set(shares.log)
        assert logged >= expected.keys()
        for logged_key in logged:
            head = shares.head(logged_key)
            assert (None if head is None else head[:2]) == expected.get(logged_key)
        live = sum(len({f for f in frees}) for frees in state.values())
        assert sum(len(h) for h in shares.heaps.values()) <= 2 * live + 64


def test_the_tracker_spreads_a_recount_over_a_round_of_cycles() -> None:
    # After the first count, each call counts an eighth of the running jobs (no cycle pays
    # for all of them); at the end of the round the counts are the whole mix, published
    # since it has drifted.
    nodes = [make_node(f"n{i}").gpus(2, memory="1000MiB") for i in range(20)]
    pending = [make_job(1).gpu_memory("320MiB")]
    first = make_snapshot(nodes, pending, running=[make_running(10).on("n0", 0).share("470MiB")])
    tracker = MixTracker()
    assert sorted(tracker.apply(first).workload or ()) == sorted(job_mix(first))
    running = [make_running(100 + i).on(f"n{i % 20}", i // 20).share("680MiB") for i in range(40)]
    moved = make_snapshot(nodes, pending, running=running)
    for _ in range(tracker.recount - 1):
        assert sorted(tracker.apply(moved).workload or ()) == sorted(job_mix(first))
    assert sorted(tracker.apply(moved).workload or ()) == sorted(job_mix(moved))
    assert tracker.publications == 2
