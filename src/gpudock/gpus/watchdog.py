"""The GPU-memory watchdog's decision: which jobs are over their limit, which
processes belong to no job. Pure: the samples come in, a ``Verdict`` goes out.

::

    NVML: GPU ──► [(pid, used bytes)]        (NodeGpuMonitor samples, every ≤ 500 ms)
    pid ──► /proc/<pid>/cgroup ──► container id ──► job   (processes.py, the sink)
                                   │
    judge(samples, assignments) ───┤  per (job, GPU): sum of its processes' memory
                                   ├─► Offence: over the job's per-GPU limit, or on a
                                   │            GPU the job was not given
                                   └─► Stray:   a process of no job on a GPU a job holds

A job with whole GPUs has no memory limit: it may fill them. A shared job's
limit on each of its GPUs is its ``gpu_memory`` share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Assignment:
    """What one job holds on this node: its GPUs and, for a shared job, its
    memory limit per GPU (bytes; None: whole GPUs, no limit)."""

    job_id: int
    gpu_uuids: tuple[str, ...]
    memory_limit: int | None = None


@dataclass(frozen=True, slots=True)
class ProcessSample:
    """One compute process on one GPU, attributed: ``job_id`` None when its
    container is no job's (or it runs in none: ``container`` None)."""

    gpu_uuid: str
    pid: int
    used: int  # bytes; 0 when NVML cannot tell
    container: str | None
    job_id: int | None


@dataclass(frozen=True, slots=True)
class Offence:
    """A job using more of a GPU than it may: ``limit`` 0 on a GPU it was not given."""

    job_id: int
    gpu_uuid: str
    used: int
    limit: int
    pid: int  # its process using the most memory there

    @property
    def reason(self) -> str:
        """The job's failure reason, one line."""
        if self.limit == 0:
            return (
                f"GPU memory used on a GPU not allocated to the job: {_size(self.used)} "
                f"on {self.gpu_uuid} (pid {self.pid})"
            )
        return (
            f"GPU memory limit exceeded: used {_size(self.used)} of "
            f"{_size(self.limit)} on {self.gpu_uuid} (pid {self.pid})"
        )


@dataclass(frozen=True, slots=True)
class Stray:
    """A process of no gpudock job on a GPU a job holds."""

    gpu_uuid: str
    pid: int
    used: int
    container: str | None


@dataclass(slots=True)
class Verdict:
    offences: list[Offence] = field(default_factory=list)
    strays: list[Stray] = field(default_factory=list)
    usage: dict[tuple[int, str], int] = field(default_factory=dict)  # (job, GPU) -> bytes


def _size(num_bytes: int) -> str:
    """``6.1 GiB``, ``512.0 MiB``: one decimal, as ``nvidia-smi`` users read it."""
    if num_bytes >= 1024**3:
        return f"{num_bytes / 1024**3:.1f} GiB"
    return f"{num_bytes / 1024**2:.1f} MiB"


def judge(samples: Iterable[ProcessSample], assignments: Sequence[Assignment]) -> Verdict:
    """Sum each job's memory per GPU and say who is over, and what runs unowned.

    One offence per (job, GPU) at most; a job's process on a GPU it was not
    given is an offence whatever its size.
    """
    by_job = {a.job_id: a for a in assignments}
    held = {uuid for a in assignments for uuid in a.gpu_uuids}
    verdict = Verdict()
    top: dict[tuple[int, str], ProcessSample] = {}
    for sample in samples:
        if sample.job_id is None or sample.job_id not in by_job:
            if sample.gpu_uuid in held:
                stray = Stray(sample.gpu_uuid, sample.pid, sample.used, sample.container)
                verdict.strays.append(stray)
            continue
        key = (sample.job_id, sample.gpu_uuid)
        verdict.usage[key] = verdict.usage.get(key, 0) + sample.used
        if key not in top or sample.used > top[key].used:
            top[key] = sample
    for (job_id, gpu), used in verdict.usage.items():
        assignment = by_job[job_id]
        if gpu not in assignment.gpu_uuids:
            limit = 0
        elif assignment.memory_limit is not None and used > assignment.memory_limit:
            limit = assignment.memory_limit
        else:
            continue
        verdict.offences.append(Offence(job_id, gpu, used, limit, top[(job_id, gpu)].pid))
    return verdict
