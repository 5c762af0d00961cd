"""Filter policy: does the node have the GPUs (or GPU memory shares) the job needs?

Whole-GPU (exclusive) jobs need ``gpus`` healthy idle GPUs of the model.
Shared jobs need ``gpus`` healthy GPUs of the model that are not held
exclusively and have at least ``gpu_memory`` free. Only unhealthy GPUs are
excluded. A node that could not fit the job even if everything on it ended
(too few GPUs of the model, or GPUs too small) is ``UNRESOLVABLE``; one that
is merely busy is ``UNSCHEDULABLE``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudock.core.job import PendingReason
from gpudock.core.units import format_size
from gpudock.scheduler.capacity import model_gpus, usable_now
from gpudock.scheduler.framework import SUCCESS, NodeState, Rejection, Status, StatusCode
from gpudock.scheduler.snapshot import JobRequest


def _noun(n: int) -> str:
    return "GPU" if n == 1 else "GPUs"


def _model_gpus(job: JobRequest) -> str:
    """``4 GPUs`` or ``4 H100 GPUs``."""
    model = f"{job.gpu_model} " if job.gpu_model else ""
    return f"{job.gpus} {model}{_noun(job.gpus)}"


def _status_words(job: JobRequest) -> tuple[str, str]:
    """What a node has too few of, ever and now: ``H100 GPUs`` / ``free H100 GPUs``."""
    model = f"{job.gpu_model} " if job.gpu_model else ""
    if job.shared:
        size = format_size(job.gpu_memory)
        return f"{model}GPUs of at least {size}", f"{model}GPUs with {size} free"
    return f"{model}GPUs", f"free {model}GPUs"


@dataclass(frozen=True, slots=True)
class _Fit:
    """How close one node comes to fitting a job.

    ``count``: GPUs that fit (now, or ever when ``ever``); ``memory``: the
    most free memory on one shareable GPU (or the largest GPU when ``ever``).
    """

    count: int
    memory: int = 0


def _fit(job: JobRequest, node: NodeState, ever: bool) -> _Fit:
    """GPUs of ``node`` that fit ``job`` now (``ever=False``) or if all were idle."""
    if not job.shared and job.gpu_model is None:  # O(1) with the node's counters
        return _Fit(len(node.gpus) if ever else node.idle_gpus)
    gpus = model_gpus(job, node)
    if not job.shared:
        return _Fit(len(gpus) if ever else sum(1 for g in gpus if g.healthy and g.idle))
    share = job.gpu_memory
    assert share is not None
    if ever:
        big = [g.memory_total for g in gpus]
        return _Fit(sum(1 for m in big if m >= share), max(big, default=0))
    fits = sum(1 for g in gpus if usable_now(job, g))
    return _Fit(fits, max((g.free_memory for g in gpus if g.shareable), default=0))


class GpuCapacity:
    """Rejects nodes without enough free GPUs or GPU memory for the job (layer ``devices``)."""

    name = "gpu_capacity"
    layer = "devices"

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if job.gpus == 0:
            return SUCCESS
        ever = _fit(job, node, ever=True)
        if ever.count < job.gpus:
            what = _status_words(job)[0]
            return Status.unresolvable(self.layer, f"node {node.name} has {ever.count} {what}")
        now = _fit(job, node, ever=False)
        if now.count < job.gpus:
            what = _status_words(job)[1]
            return Status.unschedulable(self.layer, f"node {node.name} has {now.count} {what}")
        return SUCCESS

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """Name the node that comes closest, with numbers.

        Only nodes that could ever fit the job are compared, unless none can:
        ``needs 4 GPUs; node gpu-0 has 2 free`` (one such node),
        ``needs 4 GPUs; the most free on one node is 2 (gpu-1)``,
        ``needs 20GiB on 1 GPU; the most free on one GPU is 8GiB (node gpu-0)``,
        ``needs 16 GPUs; the largest node has 8 (gpu-0)`` (none ever fits).
        """
        busy = [r for r in rejections if r.status.code is StatusCode.UNSCHEDULABLE]
        ever = not busy
        considered = rejections if ever else busy
        fits = [(_fit(job, r.node, ever), r.node.name) for r in considered]
        single = len(considered) == 1
        if job.shared:
            message, counterfactual = _explain_shared(job, fits, single, ever)
        else:
            message, counterfactual = _explain_whole(job, fits, single, ever)
        return PendingReason(self.layer, message, counterfactual)


def _best(fits: list[tuple[_Fit, str]], by_memory: bool) -> tuple[_Fit, str]:
    """The closest node: most fitting GPUs (or most memory), ties to the lowest name."""
    if by_memory:
        return min(fits, key=lambda f: (-f[0].memory, f[1]))
    return min(fits, key=lambda f: (-f[0].count, f[1]))


def _explain_whole(
    job: JobRequest, fits: list[tuple[_Fit, str]], single: bool, ever: bool
) -> tuple[str, str]:
    fit, name = _best(fits, by_memory=False)
    need = f"needs {_model_gpus(job)}"
    if ever:
        counterfactual = f"needs a node with at least {_model_gpus(job)}"
        if single:
            has = f"only {fit.count}" if fit.count else "none"
            return f"{need}; node {name} has {has}", counterfactual
        if fit.count == 0:
            return f"{need}; no node has any", counterfactual
        return f"{need}; the largest node has {fit.count} ({name})", counterfactual
    missing = job.gpus - fit.count
    counterfactual = f"runs when {missing} more {_noun(missing)} free up on {name}"
    if single:
        return f"{need}; node {name} has {fit.count} free", counterfactual
    return f"{need}; the most free on one node is {fit.count} ({name})", counterfactual


def _explain_shared(
    job: JobRequest, fits: list[tuple[_Fit, str]], single: bool, ever: bool
) -> tuple[str, str]:
    assert job.gpu_memory is not None
    size = format_size(job.gpu_memory)
    need = f"needs {size} on {_model_gpus(job)}"
    free = "" if ever else " free"
    by_count = _best(fits, by_memory=False)
    if by_count[0].count > 0:  # some GPUs fit, but too few on any one node
        fit, name = by_count
        if single:
            message = f"{need}; node {name} has {fit.count} {_noun(fit.count)} with {size}{free}"
        else:
            message = f"{need}; the most GPUs with {size}{free} on one node is {fit.count} ({name})"
    else:
        fit, name = _best(fits, by_memory=True)
        what = "the largest GPU has" if ever else "the most free on one GPU is"
        message = f"{need}; {what} {format_size(fit.memory)} (node {name})"
    if ever:
        return message, f"needs a node with {_model_gpus(job)} of at least {size}"
    missing = job.gpus - fit.count
    verb = "has" if missing == 1 else "have"
    return message, f"runs when {missing} more {_noun(missing)} on {name} {verb} {size} free"
