"""Order policy: higher priority first, then first come first served."""

from __future__ import annotations

from mypy_extensions import mypyc_attr

from gpudock.scheduler.framework import OrderKey
from gpudock.scheduler.snapshot import JobRequest


@mypyc_attr(native_class=False)  # compiled, the registry still reads ``name`` and __init__ hints
class PriorityFifo:
    """Sort by priority (descending), then ``submitted_at``, then job id.

    The id makes the order total, so a cycle is deterministic even when two
    jobs share a priority and a submit time.
    """

    name = "priority_fifo"

    def key(self, job: JobRequest) -> OrderKey:
        return (-job.priority, job.submitted_at, job.id)
