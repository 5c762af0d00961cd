"""Step 5's victim search gives the answers of its definition, job after job.

The capacity index's ``VictimFinder`` answers the priority kind with
``victims.VictimSearch`` and ``boards.Board`` (bounds, best-first, victims taken
as the cycle goes);
``preemption.choose_victims`` is the definition: try every node. Here random
nodes carry running jobs that hold whole GPUs or shares of them, MIG devices of a GPU in
MIG mode (or only host memory), of several queues, priorities, ages, some protected or already
stopping; nodes may count host memory, which jobs hold and ask for; blocked jobs of
several shapes (MIG jobs among them) then ask in turn, and each must get exactly the victim set the
definition gives it over the candidates not taken by the jobs before it. Random
preemption rules (``preemption_rules.py``: restart costs declared, measured or the
cluster's, checkpoints, estimates, protected time and hysteresis) decide who is
protected and which sets pay for themselves, on both paths alike.
The nodes' multi-victim bounds, computed only as far as a search reads them,
come in the order of computing them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.config import SchedulerConfig
from gpudock.scheduler.accel.indexed import CapacityIndex
from gpudock.scheduler.accel.victims import VictimSearch
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.framework import Profile
from gpudock.scheduler.post_filter import FiltersAfter, PostFilter
from gpudock.scheduler.preemption import (
    Preemption,
    VictimFinder,
    choose_victims,
    may_preempt,
    plan_preemptions,
    running_by_node,
)
from gpudock.scheduler.preemption_rules import PreemptionRules
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.running import RunningIndex
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import (
    GpuView,
    JobRequest,
    MigView,
    NodeView,
    RunningJob,
    Snapshot,
)

from ..builders import GiB, gpu_uuid
from .test_unknown_filters import HashFilter

TOTAL = 80 * GiB
QUEUES = ["a", "b"]
LAYOUTS = [("3g.40gb", "3g.40gb"), ("1g.10gb", "1g.10gb", "1g.10gb", "3g.40gb"), ("7g.80gb",)]


def mig_layout(draw: st.DrawFn, name: str, count: int) -> tuple[int | None, list[MigView]]:
    """Which GPU of the node is in MIG mode (often none), and its devices, free."""
    if count == 0 or not draw(st.sampled_from([False, False, True])):
        return None, []
    gpu = draw(st.integers(0, count - 1))
    devices = [
        MigView(
            f"MIG-{name}-{slot}",
            gpu_uuid(name, gpu),
            profile,
            int(profile.split(".")[1].removesuffix("gb")) * GiB,
            healthy=draw(st.sampled_from([True] * 9 + [False])),
        )
        for slot, profile in enumerate(draw(st.sampled_from(LAYOUTS)))
    ]
    return gpu, devices


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[NodeView], list[RunningJob], float]:
    """Nodes of 0-8 GPUs (one of them maybe in MIG mode; and host memory, or none counted)
    and the running jobs that hold them, consistent with each other."""
    now = 1000.0
    nodes: list[NodeView] = []
    running: list[RunningJob] = []
    next_id = 1000
    for n in range(draw(st.integers(1, 6))):
        name = f"n{n}"
        count = draw(st.sampled_from([0, 2, 4, 8, 8, 8]))
        used = [0] * count
        exclusive = [False] * count
        shares = [0] * count
        healthy = [draw(st.sampled_from([True] * 9 + [False])) for _ in range(count)]
        mig_gpu, devices = mig_layout(draw, name, count)
        if mig_gpu is not None:
            healthy[mig_gpu] = False  # in MIG mode: its devices are the units
        host_memory = draw(st.sampled_from([None, None, 64 * GiB, 256 * GiB]))
        used_host_memory = 0
        for _ in range(draw(st.integers(0, 10))):
            kind = draw(st.sampled_from(["whole", "whole", "whole", "share", "host", "mig", "mig"]))
            held = draw(st.sampled_from([None, None, 8 * GiB, 24 * GiB, 48 * GiB]))
            if (
                host_memory is not None
                and held is not None
                and used_host_memory + held > host_memory
            ):
                held = None  # consistent: the node's jobs hold at most its memory
            mig = None
            if kind == "host":  # holds no GPU, only CPUs or memory
                taken, memory = [], None
            elif kind == "mig":  # holds a MIG device, and no GPU
                free = [d for d in devices if not d.held]
                if not free:
                    continue
                device = draw(st.sampled_from(free))
                devices[devices.index(device)] = replace(device, held=True)
                taken, memory, mig = [], None, device.uuid
            elif kind == "whole":
                idle = [
                    i for i in range(count) if not exclusive[i] and shares[i] == 0 and i != mig_gpu
                ]
                if not idle:
                    continue
                k = min(len(idle), draw(st.sampled_from([1, 1, 1, 2, 2, 4])))
                taken = draw(st.permutations(idle))[:k]
                for i in taken:
                    exclusive[i], used[i] = True, TOTAL
                memory = None
            else:
                share = draw(st.sampled_from([10 * GiB, 20 * GiB, 40 * GiB]))
                open_ = [
                    i
                    for i in range(count)
                    if not exclusive[i] and TOTAL - used[i] >= share and i != mig_gpu
                ]
                if not open_:
                    continue
                i = draw(st.sampled_from(open_))
                used[i] += share
                shares[i] += 1
                taken, memory = [i], share
            used_host_memory += held or 0
            next_id += 1
            running.append(
                RunningJob(
                    id=next_id,
                    queue=draw(st.sampled_from(["a", "a", "a", "b"])),
                    priority=draw(st.integers(0, 3)),
                    node=name,
                    gpu_uuids=tuple(gpu_uuid(name, i) for i in sorted(taken)),
                    memory_per_gpu=memory,
                    started_at=now - draw(st.sampled_from([0.0, 10.0, 10.0, 50.0, 300.0])),
                    min_runtime=draw(st.sampled_from([None, None, None, 100.0])),
                    preemptible=draw(st.sampled_from([True] * 7 + [False])),
                    stopping=draw(st.sampled_from([False] * 7 + [True])),
                    max_runtime=draw(st.sampled_from([None, None, 600.0, 3000.0])),
                    memory=held,
                    restart_cost=draw(st.sampled_from([None, None, 0.0, 30.0, 400.0])),
                    checkpoint_interval=draw(st.sampled_from([None, None, 40.0])),
                    start_seconds=draw(st.sampled_from([None, None, 20.0, 90.0])),
                    estimated_end=draw(st.sampled_from([None, None, now + 20.0, now + 900.0])),
                    mig=mig,
                )
            )
        gpus = tuple(
            GpuView(
                gpu_uuid(name, i), i, "H100", TOTAL, used[i], exclusive[i], shares[i], healthy[i]
            )
            for i in range(count)
        )
        available = draw(st.sampled_from([True, True, True, True, False]))
        nodes.append(
            NodeView(
                name,
                gpus,
                available,
                host_memory=host_memory,
                used_host_memory=used_host_memory if host_memory is not None else 0,
                migs=tuple(devices),
            )
        )
    return nodes, running, now


@st.composite
def blocked_jobs(draw: st.DrawFn) -> list[JobRequest]:
    """Jobs that repeat a few shapes (so boards are shared; MIG jobs among them), in any
    priority order."""
    shapes = draw(
        st.lists(
            st.tuples(
                st.sampled_from([1, 2, 3, 4, 8, 8]),
                st.sampled_from([None, None, 20 * GiB, 40 * GiB]),
                st.sampled_from(QUEUES),
                st.sampled_from([None, None, 16 * GiB, 40 * GiB, 100 * GiB]),
                st.sampled_from([None, None, None, "3g.40gb", "1g.10gb", "7g.80gb"]),
            ),
            min_size=1,
            max_size=4,
        )
    )
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        gpus, share, queue, memory, mig = draw(st.sampled_from(shapes))
        jobs.append(
            JobRequest(
                i + 1,
                0 if mig is not None else gpus,
                float(i),
                None if mig is not None else share,
                priority=draw(st.integers(0, 5)),
                queue=queue,
                can_preempt=draw(st.sampled_from([True, True, True, False])),
                max_runtime=draw(st.sampled_from([None, None, 300.0, 2000.0])),
                memory=memory,
                remaining=draw(st.sampled_from([None, None, 10.0, 200.0])),
                mig=mig,
            )
        )
    return jobs


rule_sets = st.builds(
    PreemptionRules,
    st.sampled_from([0.0, 60.0]),
    st.sampled_from([0.0, 0.0, 30.0]),
    st.sampled_from([0.0, 0.0, 0.5]),
    st.sampled_from([0.0, 0.0, 2.0]),
)


PROFILE = build_profile(SchedulerConfig())


def accelerated(state: CycleState, index: RunningIndex) -> tuple[VictimFinder, PostFilter]:
    """The capacity index's victim finder, and its ``PostFilter``, for one cycle."""
    accelerator = CapacityIndex()
    feasibility = accelerator.post_filter(state, PROFILE, SchedulerSession())
    return accelerator.victims(state, index, feasibility), feasibility


def by_definition(
    blocked: list[JobRequest],
    nodes: list[NodeView],
    running: list[RunningJob],
    now: float,
    rules: PreemptionRules,
) -> list[tuple[Preemption, float | None, float | None]]:
    """The priority kind, one job at a time, each over what the jobs before it left: the
    cheapest set of unprotected victims, made only if it pays for itself and the ranks
    are far enough apart."""
    state = CycleState(nodes)
    feasibility = FiltersAfter(state, PROFILE)
    taken: set[int] = set()
    out: list[tuple[Preemption, float | None, float | None]] = []
    for job in blocked:
        if not job.can_preempt or not may_preempt(job):
            continue
        left = [r for r in running if r.id not in taken]
        choice = choose_victims(
            job,
            [v.name for v in nodes],
            running_by_node(left),
            lambda v, job=job: v.queue == job.queue and v.priority < job.priority,  # type: ignore[misc]
            now,
            feasibility,
            rules,
        )
        if choice is None:
            continue
        weighed = rules.weigh(job, choice.victims, now)
        if not weighed.worth:  # rules 2 and 3: pays for itself, ranks far enough apart
            continue
        taken |= set(choice.ids)
        why = f"job {job.id} (priority {job.priority})"
        gain = weighed.gain if weighed.gain != float("inf") else None
        out.extend(
            (Preemption(v.id, job.id, why), cost, gain)
            for v, cost in zip(choice.victims, weighed.costs, strict=True)
        )
    return out


def weighed(preemptions: list[Preemption]) -> list[tuple[Preemption, float | None, float | None]]:
    return [(p, p.cost, p.gain) for p in preemptions]


@settings(max_examples=500, deadline=None)
@given(clusters(), blocked_jobs(), rule_sets)
def test_each_blocked_job_gets_the_victims_of_the_definition(
    cluster: tuple[list[NodeView], list[RunningJob], float],
    blocked: list[JobRequest],
    rules: PreemptionRules,
) -> None:
    nodes, running, now = cluster
    state, index = CycleState(nodes), RunningIndex(running, now, rules=rules)
    finder, _ = accelerated(state, index)
    preemptions, _ = plan_preemptions(blocked, state, running, now, None, (), index, finder)
    assert weighed(preemptions) == by_definition(blocked, nodes, running, now, rules)
    plain, reference = CycleState(nodes), RunningIndex(running, now, rules=rules)
    defined = FiltersAfter(plain, PROFILE)
    answers = plan_preemptions(blocked, plain, running, now, index=reference, feasibility=defined)[
        0
    ]
    assert weighed(answers) == weighed(preemptions)


@settings(max_examples=300, deadline=None)
@given(clusters(), blocked_jobs())
def test_multi_victim_bounds_come_in_the_order_of_computing_them_all(
    cluster: tuple[list[NodeView], list[RunningJob], float], blocked: list[JobRequest]
) -> None:
    nodes, running, now = cluster
    state = CycleState(nodes)
    search = VictimSearch(state, RunningIndex(running, now), FiltersAfter(state, PROFILE))
    for job in blocked:
        every = []
        for name in search.nodes:
            bound = search.multi_bound(job, name, search.candidates(job.queue, name))
            if bound is not None:
                every.append((bound, name))
        multis = search.multis(job)
        assert [multis.at(search, i) for i in range(len(every) + 1)] == [*sorted(every), None]


@dataclass
class OtherQueues:
    """A ``Reclaimer`` whose every job may reclaim from the other queues' jobs."""

    granted_to: list[int] = field(default_factory=list)

    def reclaim_rule(self, job: JobRequest) -> Callable[[RunningJob], bool] | None:
        return lambda victim: victim.queue != job.queue

    def granted(self, job: JobRequest) -> None:
        self.granted_to.append(job.id)


@settings(max_examples=300, deadline=None)
@given(clusters(), blocked_jobs(), rule_sets)
def test_the_reclaim_kind_gets_the_victims_of_the_definition(
    cluster: tuple[list[NodeView], list[RunningJob], float],
    blocked: list[JobRequest],
    rules: PreemptionRules,
) -> None:
    nodes, running, now = cluster
    state, index = CycleState(nodes), RunningIndex(running, now, rules=rules)
    finder, _ = accelerated(state, index)
    fast, slow = OtherQueues(), OtherQueues()
    answers = plan_preemptions(blocked, state, running, now, fast, blocked, index, finder)
    plain, reference = CycleState(nodes), RunningIndex(running, now, rules=rules)
    feasibility = FiltersAfter(plain, PROFILE)
    defined = plan_preemptions(
        blocked, plain, running, now, slow, blocked, reference, feasibility=feasibility
    )
    assert answers == defined
    assert weighed(answers[0]) == weighed(defined[0])
    assert fast.granted_to == slow.granted_to


@settings(max_examples=300, deadline=None)
@given(clusters(), blocked_jobs(), rule_sets)
def test_a_cycle_with_running_jobs_and_host_memory_gives_the_generic_plan(
    cluster: tuple[list[NodeView], list[RunningJob], float],
    blocked: list[JobRequest],
    rules: PreemptionRules,
) -> None:
    """Whole cycles (placements, preemptions, the EASY reservation and backfill) on these
    clusters, under random preemption rules: the accelerated path's Plan is the generic
    path's, down to the cost and gain of each preemption."""
    nodes, running, now = cluster
    snapshot = Snapshot(now, tuple(nodes), tuple(blocked), tuple(running))
    profile = replace(build_profile(SchedulerConfig()), preemption=rules)
    fast, slow = run_cycle(snapshot, profile), run_cycle(snapshot, profile, index=False)
    assert fast == slow
    assert weighed(fast.preemptions) == weighed(slow.preemptions)


@st.composite
def hashed_profiles(draw: st.DrawFn) -> Profile:
    """The default profile with a filter that declares nothing, anywhere in it: the
    accelerated ``PostFilter`` runs it on copies of the nodes as they would be."""
    extra = HashFilter(
        salt=draw(st.integers(0, 99)),
        share=draw(st.integers(0, 6)),
        never=draw(st.booleans()),
        by_idle=draw(st.sampled_from([False, False, True])),
    )
    at = draw(st.integers(0, len(PROFILE.filters)))
    return replace(PROFILE, filters=(*PROFILE.filters[:at], extra, *PROFILE.filters[at:]))


@settings(max_examples=300, deadline=None)
@given(clusters(), blocked_jobs(), hashed_profiles())
def test_preemption_and_reservation_hear_a_filter_that_declares_nothing(
    cluster: tuple[list[NodeView], list[RunningJob], float],
    blocked: list[JobRequest],
    profile: Profile,
) -> None:
    """Whole cycles (victims, the EASY reservation, backfill) with an undeclared filter,
    not monotone in what runs on a node when it rejects by idle GPUs: the accelerated
    path's Plan is the generic path's."""
    nodes, running, now = cluster
    snapshot = Snapshot(now, tuple(nodes), tuple(blocked), tuple(running))
    assert run_cycle(snapshot, profile) == run_cycle(snapshot, profile, index=False)
