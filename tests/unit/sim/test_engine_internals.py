"""Internals of the simulator's engine that its speed depends on, pinned to their slow originals."""

from __future__ import annotations

from dataclasses import replace

from gpudock.core.affinity import Toleration
from gpudock.scheduler.snapshot import JobRequest
from gpudock.sim.engine import _with_priority


def test_the_fast_priority_copy_equals_dataclasses_replace_on_every_field() -> None:
    request = JobRequest(
        id=7,
        gpus=2,
        submitted_at=3.5,
        gpu_memory=10,
        gpu_model="H100",
        priority=4,
        queue="vision",
        user="ana",
        nodes=2,
        cpus=8.0,
        max_runtime=60.0,
        can_preempt=False,
        node_selector=(("zone", "a"),),
        tolerations=(Toleration(key="gpu"),),
        topology="nvlink",
    )
    assert _with_priority(request, -9) == replace(request, priority=-9)
