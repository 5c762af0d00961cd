"""Properties of admission, ordering and entitlements over random queue setups (hypothesis).

Setups: up to 2 cohorts and 5 queues (plus ``default``) with random weights,
guarantees, limits and borrow/lend flags; cluster capacity equal to the sum
of guarantees (nothing unguaranteed) or above it; streams of fractional and
whole-GPU requests, CPU and GPU-memory amounts included.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.unit.queue.builders import GiB

from gpudock.queue import (
    RESOURCES,
    Admission,
    FairShare,
    FairShareConfig,
    FairShareOrder,
    QueuesConfig,
    QueueSet,
    QuotaLedger,
    Resources,
    entitlements,
)
from gpudock.queue.resources import total

NAMES = ["q0", "q1", "q2", "q3", "q4"]
COHORTS = ["c0", "c1"]
SHARES = [Fraction(1, 4), Fraction(1, 2), Fraction(1), Fraction(2), Fraction(4)]


UNITS = {"gpus": 1, "gpu_memory": 80 * GiB, "cpus": 4}


@st.composite
def quota(draw: st.DrawFn, at_least: dict[str, int] | None = None) -> dict[str, int]:
    """Some resources set to 0-6 units, each at least ``at_least``'s value (a guarantee)."""
    floor = at_least or {}
    return {
        resource: floor.get(resource, 0) + draw(st.integers(0, 6)) * unit
        for resource, unit in UNITS.items()
        if draw(st.booleans())
    }


@st.composite
def queue_sets(draw: st.DrawFn) -> QueueSet:
    cohorts = COHORTS[: draw(st.integers(0, 2))]
    queues = []
    for name in NAMES[: draw(st.integers(1, 5))]:
        guarantee = draw(quota())
        queues.append(
            {
                "name": name,
                "cohort": draw(st.sampled_from([None, *cohorts])),
                "weight": draw(st.sampled_from([0.5, 1.0, 2.0, 3.0])),
                "guarantee": guarantee,
                "limit": draw(quota(at_least=guarantee)),
                "borrow": draw(st.sampled_from([True, True, True, False])),
                "lend": draw(st.booleans()),
            }
        )
    return QueueSet.from_config(QueuesConfig.model_validate({"cohorts": cohorts, "queues": queues}))


@st.composite
def capacities(draw: st.DrawFn, queues: QueueSet) -> Resources:
    spare = draw(st.sampled_from([0, 0, 2, 8]))
    g = queues.total_guarantee()
    return Resources(g.gpus + spare, g.gpu_memory + spare * 80 * GiB, g.cpus + 4 * spare)


@st.composite
def requests(draw: st.DrawFn, queues: QueueSet) -> tuple[str, Resources]:
    queue = draw(st.sampled_from([*queues.queues] * 4 + ["stranger"]))
    gpus = draw(st.sampled_from(SHARES))
    memory = int(gpus * 80 * GiB)
    cpus = draw(st.integers(0, 4))
    return queue, Resources(gpus, Fraction(memory), Fraction(cpus))


@dataclass(frozen=True)
class Scenario:
    """Queues, capacity, what already runs (any state, even over quota) and a request stream."""

    queues: QueueSet
    capacity: Resources
    running: dict[str, Resources]
    stream: list[tuple[str, Resources]]


@st.composite
def running(draw: st.DrawFn, queues: QueueSet) -> dict[str, Resources]:
    usage = {}
    for name in queues.queues:
        if draw(st.booleans()):
            gpus = Fraction(draw(st.integers(0, 16)), 2)
            usage[name] = Resources(gpus, gpus * 80 * GiB, Fraction(draw(st.integers(0, 12))))
    return usage


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    queues = draw(queue_sets())
    return Scenario(
        queues,
        draw(capacities(queues)),
        draw(running(queues)),
        draw(st.lists(requests(queues), max_size=40)),
    )


def balances(
    queues: QueueSet, usage: dict[str, Resources]
) -> dict[str, tuple[Resources, Resources]]:
    """Each lending group's (borrowed B, lendable L), recomputed from scratch."""
    borrowed: dict[str, Resources] = defaultdict(Resources)
    lendable: dict[str, Resources] = defaultdict(Resources)
    for name in set(usage) | set(queues.queues):
        queue, used = queues.get(name), usage.get(name, Resources())
        borrowed[queue.group] += queue.borrowed(used)
        lendable[queue.group] += queue.lendable(used)
    return {group: (borrowed[group], lendable[group]) for group in borrowed}


def overflow(queues: QueueSet, usage: dict[str, Resources]) -> Resources:
    """``sum over lending groups of max(0, B - L)``."""
    return total((b - lend).positive() for b, lend in balances(queues, usage).values())


Step = tuple[QuotaLedger, str, Resources, Admission]


def replay(scenario: Scenario) -> Iterator[Step]:
    """Admit the stream in order; yield (ledger, queue, request, admission) after each step."""
    ledger = QuotaLedger(scenario.queues, scenario.capacity, scenario.running)
    for queue, request in scenario.stream:
        admission = ledger.check(queue, request)
        if admission.admitted:
            ledger.charge(queue, request)
        yield ledger, queue, request, admission


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_admission_never_lets_a_queue_exceed_its_limit(scenario: Scenario) -> None:
    queues = scenario.queues
    for ledger, name, request, admission in replay(scenario):
        if admission.admitted:
            used, limits = ledger.usage(name), queues.get(name).limit
            for resource in queues.tracked:
                limit = limits.get(resource)
                if request.get(resource) > 0:  # (what runs may start over a limit)
                    assert limit is None or used.get(resource) <= limit


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_without_borrowing_a_queue_never_exceeds_its_guarantee(scenario: Scenario) -> None:
    queues = scenario.queues
    for ledger, name, request, admission in replay(scenario):
        queue = queues.get(name)
        if admission.admitted and not queue.borrow:
            assert not admission.borrows
            for resource in queues.tracked:
                if request.get(resource) > 0:
                    assert ledger.usage(name).get(resource) <= queue.guarantee.get(resource)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_borrowing_never_exceeds_what_cohorts_and_the_cluster_can_lend(scenario: Scenario) -> None:
    """After an admission that borrows resource r: sum over groups of max(0, B - L) <= U in r."""
    queues = scenario.queues
    unguaranteed = queues.unguaranteed(scenario.capacity)
    for ledger, name, request, admission in replay(scenario):
        spill = overflow(queues, ledger.usages())
        for resource in queues.tracked:  # the ledger's running balance is exact
            assert ledger.overflow().get(resource) == spill.get(resource)
        if not admission.admitted:
            continue
        guarantee = queues.get(name).guarantee
        for resource in queues.tracked:
            borrowed_now = ledger.usage(name).get(resource) > guarantee.get(resource)
            if not (borrowed_now and request.get(resource) > 0):
                continue
            assert admission.borrows
            assert spill.get(resource) <= unguaranteed.get(resource)
            if unguaranteed.get(resource) == 0:  # each cohort borrows at most what it lends
                for borrowed, lendable in balances(queues, ledger.usages()).values():
                    assert borrowed.get(resource) <= lendable.get(resource)


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_requests_within_the_guarantee_are_always_admitted(scenario: Scenario) -> None:
    queues = scenario.queues
    ledger = QuotaLedger(queues, scenario.capacity, scenario.running)
    for name, request in scenario.stream:
        queue, admission = queues.get(name), ledger.check(name, request)
        after = ledger.usage(name) + request
        if queue.declared and all(after.get(r) <= queue.guarantee.get(r) for r in queues.tracked):
            assert admission.admitted and not admission.borrows
        if admission.admitted:
            ledger.charge(name, request)


@st.composite
def order_scenarios(draw: st.DrawFn) -> tuple[QueueSet, dict[str, list[int]], list[int]]:
    queues = draw(queue_sets())
    names = [q.name for q in queues]
    jobs: dict[str, list[int]] = {}
    job_id = 0
    for name in names:
        count = draw(st.integers(0, 6))
        jobs[name] = list(range(job_id, job_id + count))
        job_id += count
    charges = draw(st.lists(st.integers(0, 3), min_size=job_id, max_size=job_id))
    return queues, jobs, charges


def drain(
    queues: QueueSet, jobs: dict[str, list[int]], charges: list[int], check: bool
) -> list[int]:
    """Run the order, charging ``charges[i]`` GPUs for the i-th job; check minimality."""
    shares = FairShare.build(queues, FairShareConfig(), Resources(Fraction(16), Fraction(0)))
    usage: dict[str, Resources] = defaultdict(Resources)
    owner = {job: name for name, listed in jobs.items() for job in listed}
    left = {name: len(listed) for name, listed in jobs.items()}
    out: list[int] = []
    for job in FairShareOrder(jobs, shares, lambda q: usage[q]):
        name = owner[job]
        if check:
            keys = [(shares.share(q, usage[q]), q) for q, n in left.items() if n > 0]
            assert (shares.share(name, usage[name]), name) == min(keys)
        left[name] -= 1
        usage[name] += Resources(Fraction(charges[len(out)]))
        out.append(job)
    return out


@settings(max_examples=200, deadline=None)
@given(order_scenarios())
def test_the_order_always_serves_a_queue_with_the_lowest_share(scenario: Any) -> None:
    queues, jobs, charges = scenario
    out = drain(queues, jobs, charges, check=True)
    assert sorted(out) == sorted(j for listed in jobs.values() for j in listed)


@settings(max_examples=100, deadline=None)
@given(order_scenarios())
def test_the_order_is_deterministic(scenario: Any) -> None:
    queues, jobs, charges = scenario
    backwards = dict(reversed(list(jobs.items())))
    assert drain(queues, jobs, charges, False) == drain(queues, backwards, charges, False)


@st.composite
def demands(draw: st.DrawFn) -> tuple[QueueSet, Resources, dict[str, Resources]]:
    queues = draw(queue_sets())
    capacity = draw(capacities(queues))
    if draw(st.booleans()):  # sometimes fewer GPUs than guaranteed
        capacity = Resources(Fraction(capacity.gpus, 2), capacity.gpu_memory, capacity.cpus)
    demand = {
        name: Resources(
            Fraction(draw(st.integers(0, 20)), 4),
            Fraction(draw(st.integers(0, 10)) * 80 * GiB),
            Fraction(draw(st.integers(0, 40))),
        )
        for name in [*NAMES, "default"]
        if draw(st.booleans())
    }
    return queues, capacity, demand


@settings(max_examples=200, deadline=None)
@given(demands())
def test_entitlements_fit_capacity_and_respect_limits(scenario: Any) -> None:
    queues, capacity, demand = scenario
    shares = entitlements(queues, capacity, demand)
    for resource in RESOURCES:
        assert sum(s.get(resource) for s in shares.values()) <= capacity.get(resource)
        floors = sum(
            min(demand[n].get(resource), queues.get(n).guarantee.get(resource)) for n in demand
        )
        for name, share in shares.items():
            queue, wanted = queues.get(name), demand[name].get(resource)
            limit = queue.limit.get(resource)
            assert 0 <= share.get(resource) <= wanted
            assert limit is None or share.get(resource) <= limit
            if not queue.borrow:
                assert share.get(resource) <= queue.guarantee.get(resource)
            if floors <= capacity.get(resource):
                assert share.get(resource) >= min(wanted, queue.guarantee.get(resource))
