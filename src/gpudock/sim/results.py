"""What one simulated run records (raw facts), before any statistics.

The simulator (``engine.py``) fills a ``RunRecord`` per policy; ``metrics.py``
turns it into the figures ``gpudock simulate --json`` prints, and
``report.py`` into plots and an HTML page. Times are seconds on the virtual
clock, counted from the trace's first submission.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One trace job as the run treated it.

    ``start`` is its first start (queue delay = ``start - submit``), ``end``
    its completion; both None if the run ended first (``RunRecord.horizon``).
    ``gpus`` counts all its GPUs (a fraction for shared jobs, times nodes for
    gangs); ``service`` the GPU-seconds it ran, including work lost to
    preemption.
    """

    job_id: str
    queue: str
    submit: float
    duration: float  # true run time from the trace
    gpus: float
    start: float | None = None
    end: float | None = None
    preemptions: int = 0
    service: float = 0.0

    @property
    def jct(self) -> float | None:
        """Job completion time: submission to completion."""
        return None if self.end is None else self.end - self.submit

    @property
    def queue_delay(self) -> float | None:
        return None if self.start is None else self.start - self.submit


@dataclass(slots=True)
class RunRecord:
    """Everything one policy's run produced.

    ``utilization``: a step function as ``(time, allocated GPUs)`` points,
    each value holding until the next point. ``queue_share``: per queue, a
    step function of the GPUs it holds, likewise. ``entitled``: each queue's
    entitled fraction of the cluster (its guarantee, or equal shares when
    queues declare none), for "share received vs. entitled".
    """

    policy: str
    description: str
    oracle: bool  # the policy reads true durations: a reference bound, not deployable
    total_gpus: float
    jobs: list[JobRecord] = field(default_factory=list)
    utilization: list[tuple[float, float]] = field(default_factory=list)
    queue_share: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    entitled: dict[str, float] = field(default_factory=dict)
    preemptions: int = 0
    resizes: int = 0  # elastic jobs restarted to grow
    horizon: float = 0.0  # virtual time when the run ended
    cycles: int = 0  # scheduling cycles run
    sim_seconds: float = 0.0  # wall-clock seconds the run took
    skipped_jobs: int = 0  # trace jobs a server would refuse at submit (not replayed)
    refused: dict[str, list[str]] = field(default_factory=dict)  # reason -> their trace ids
