"""``SnapshotCache`` hands back the previous snapshot's objects wherever nothing changed."""

from __future__ import annotations

from dataclasses import replace

from gpudock.scheduler.snapshot import GpuView, NodeView, RunningJob, Snapshot
from gpudock.store.snapshot import SnapshotCache


def node(name: str, used: int = 0) -> NodeView:
    gpus = tuple(GpuView(f"GPU-{name}-{i}", i, "H100", 80, used if i == 0 else 0) for i in range(2))
    return NodeView(name, gpus)


def job(job_id: int, priority: int = 0) -> RunningJob:
    return RunningJob(job_id, "default", priority, "n0", (f"GPU-n0-{job_id % 2}",), None, 1.0)


def test_equal_nodes_and_jobs_come_back_as_the_previous_objects() -> None:
    cache = SnapshotCache()
    first = cache.intern(Snapshot(5.0, (node("n0"), node("n1")), (), (job(1), job(2))))
    second = cache.intern(Snapshot(6.0, (node("n0"), node("n1", used=40)), (), (job(1), job(2))))
    assert second.nodes[0] is first.nodes[0]
    assert second.nodes[1] is not first.nodes[1] and second.nodes[1].gpus[0].used_memory == 40
    assert second.running is first.running  # every job the same: the very tuple
    assert second.now == 6.0


def test_a_changed_job_is_new_and_the_others_are_kept() -> None:
    cache = SnapshotCache()
    first = cache.intern(Snapshot(5.0, (node("n0"),), (), (job(1), job(2), job(3))))
    second = cache.intern(Snapshot(6.0, (node("n0"),), (), (job(1), job(2, priority=5))))
    assert second.running[0] is first.running[0]
    assert second.running[1] is not first.running[1]
    assert second.running[1] == replace(first.running[1], priority=5)
    third = cache.intern(Snapshot(7.0, (node("n0"),), (), (job(1), job(2, priority=5))))
    assert third.running is second.running  # only the latest snapshot is compared against
