"""Properties of the cycle with queues, over random clusters, quotas and job streams.

Whatever the cluster, the queues and the jobs: a queue never ends a cycle
above its limit, a queue that may not borrow never above its guarantee, the
GPUs are never over-committed, preemption victims are real running jobs of
lower priority or of borrowing queues, and the Plan is deterministic. Some
nodes have a GPU in MIG mode, whose devices running and pending MIG jobs hold
and ask for: they count their compute sevenths of a GPU like any usage.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.config import SchedulerConfig
from gpudock.queue import QueuesConfig, Resources, job_usage
from gpudock.scheduler.admission import device_usage, mig_devices, queue_usage
from gpudock.scheduler.cycle import schedule
from gpudock.scheduler.snapshot import JobRequest, Plan, Snapshot

from .builders import make_node, make_running, make_snapshot

QUEUES = ("a", "b", "c")
MIG_LAYOUT = ("3g.40gb", "3g.40gb", "1g.10gb")


@st.composite
def scenario(draw: st.DrawFn) -> tuple[Snapshot, SchedulerConfig]:
    queues = []
    for name in QUEUES:
        guarantee = draw(st.integers(0, 4))
        limit = draw(st.integers(guarantee, 8) | st.none())
        queue: dict[str, object] = {
            "name": name,
            "weight": draw(st.sampled_from([1, 2, 3])),
            "guarantee": {"gpus": guarantee},
            "borrow": draw(st.booleans()),
        }
        if limit is not None:
            queue["limit"] = {"gpus": limit}
        queues.append(queue)
    config = SchedulerConfig(queues=QueuesConfig.model_validate({"queues": queues}))
    node_count = draw(st.integers(1, 3))
    nodes = [make_node(f"n{i}").gpus(draw(st.integers(1, 4))) for i in range(node_count)]
    cut = [draw(st.booleans()) for _ in nodes]  # GPU 0 in MIG mode
    for node, mig in zip(nodes, cut, strict=True):
        if mig:
            node.mig(0, *MIG_LAYOUT)
    running = []
    next_id = 1000
    for i, node in enumerate(nodes):
        size = len(node.build().gpus)
        holders = [
            make_running(next_id + slot).mig(f"n{i}", 0, slot)
            for slot in range(len(MIG_LAYOUT) if cut[i] else 0)
            if draw(st.booleans())
        ]
        holders += [
            make_running(next_id + 10 + index).on(f"n{i}", index)
            for index in range(1 if cut[i] else 0, size)
            if draw(st.booleans())
        ]
        next_id += 20
        for holder in holders:
            running.append(
                holder.queue(draw(st.sampled_from(QUEUES)))
                .priority(draw(st.integers(0, 2)))
                .started(float(next_id))
            )
    jobs = [
        JobRequest(
            id=j,
            gpus=draw(st.integers(1, 3)),
            submitted_at=float(j),
            priority=draw(st.integers(0, 3)),
            queue=draw(st.sampled_from(QUEUES)),
            gpu_memory=draw(st.sampled_from([None, None, 20 * 2**30])),
        )
        for j in range(1, draw(st.integers(1, 12)) + 1)
    ]
    jobs = [
        replace(job, gpus=0, gpu_memory=None, mig=mig)
        if (mig := draw(st.sampled_from([None, None, *MIG_LAYOUT]))) is not None
        else job
        for job in jobs
    ]
    return make_snapshot(nodes, jobs, now=5000.0, running=running), config


def usage_after(snapshot: Snapshot, plan: Plan) -> dict[str, Resources]:
    totals = {g.uuid: g.memory_total for n in snapshot.nodes for g in n.gpus}
    queue_of = {j.id: j.queue for j in snapshot.pending}
    devices = mig_devices(snapshot.nodes)
    usage = queue_usage(snapshot)
    for p in plan.placements:
        held = job_usage(p.memory_per_gpu, [totals[u] for u in p.gpu_uuids])
        if p.mig is not None:
            held = device_usage(p.mig, devices)
        usage[queue_of[p.job_id]] = usage.get(queue_of[p.job_id], Resources()) + held
    return usage


@settings(max_examples=150, deadline=None)
@given(scenario())
def test_admitted_work_respects_limits_and_guarantees(
    case: tuple[Snapshot, SchedulerConfig],
) -> None:
    snapshot, config = case
    plan = schedule(snapshot, config)
    before = queue_usage(snapshot)
    after = usage_after(snapshot, plan)
    for queue in config.queues.queues:
        used = Fraction(after.get(queue.name, Resources()).gpus)
        had = Fraction(before.get(queue.name, Resources()).gpus)
        grew = used > had
        if grew and queue.limit.gpus is not None:
            assert used <= queue.limit.gpus, (queue.name, used)
        if grew and not queue.borrow:
            assert used <= (queue.guarantee.gpus or 0), (queue.name, used)


@settings(max_examples=150, deadline=None)
@given(scenario())
def test_gpus_are_never_over_committed_and_victims_are_legitimate(
    case: tuple[Snapshot, SchedulerConfig],
) -> None:
    snapshot, config = case
    plan = schedule(snapshot, config)
    held = {u for r in snapshot.running if r.memory_per_gpu is None for u in r.gpu_uuids}
    exclusive = [u for p in plan.placements if p.memory_per_gpu is None for u in p.gpu_uuids]
    assert len(exclusive) == len(set(exclusive)) and not set(exclusive) & held
    devices = [p.mig for p in plan.placements if p.mig is not None]
    taken = {r.mig for r in snapshot.running if r.mig is not None}
    assert len(devices) == len(set(devices)) and not set(devices) & taken
    running = {r.id: r for r in snapshot.running}
    pending = {j.id: j for j in snapshot.pending}
    victims = [p.victim_id for p in plan.preemptions]
    assert len(victims) == len(set(victims))
    for preemption in plan.preemptions:
        victim, preemptor = running[preemption.victim_id], pending[preemption.preemptor_id]
        assert preemption.preemptor_id not in {p.job_id for p in plan.placements}
        same_queue_lower = victim.queue == preemptor.queue and victim.priority < preemptor.priority
        assert same_queue_lower or victim.queue != preemptor.queue
    assert schedule(snapshot, config) == plan  # deterministic


@st.composite
def running_mixes(draw: st.DrawFn) -> Snapshot:
    """Nodes of two GPU sizes and one GPU in MIG mode; running jobs exclusive or shared or
    on a MIG device, alike or not, with CPUs."""
    nodes = [
        make_node("big").gpus(4, memory="80GiB"),
        make_node("small").gpus(4, "L4", "24GiB"),
        make_node("cut").gpus(1, "H100").mig(0, *MIG_LAYOUT),
    ]
    running = [
        replace(make_running(100 + slot).mig("cut", 0, slot).build(), queue=queue)
        for slot, queue in enumerate(draw(st.lists(st.sampled_from(QUEUES), max_size=3)))
    ]
    for job_id in range(draw(st.integers(0, 30))):
        job = make_running(job_id).on(
            draw(st.sampled_from(["big", "small"])), draw(st.integers(0, 3))
        )
        job = job.queue(draw(st.sampled_from(QUEUES)))
        share = draw(st.sampled_from([None, "5GiB", "20GiB", "24GiB"]))
        if share is not None:
            job = job.share(share)
        built = job.build()
        cpus = draw(st.sampled_from([None, 0.5, 2.0, 1 / 3]))
        running.append(replace(built, cpus=cpus))
    return make_snapshot(nodes, [], running=running)


@settings(max_examples=200, deadline=None)
@given(running_mixes())
def test_queue_usage_is_the_sum_of_each_running_jobs_usage(snapshot: Snapshot) -> None:
    """Jobs alike are counted once times their number: the very per-job sum, exactly."""
    totals = {g.uuid: g.memory_total for n in snapshot.nodes for g in n.gpus}
    devices = mig_devices(snapshot.nodes)
    expected: dict[str, Resources] = {}
    for job in snapshot.running:
        held = job_usage(job.memory_per_gpu, [totals[u] for u in job.gpu_uuids], job.cpus)
        if job.mig is not None:
            held = device_usage(job.mig, devices, job.cpus)
        expected[job.queue] = expected.get(job.queue, Resources()) + held
    assert queue_usage(snapshot) == expected
