"""Filter policy: does the node have the GPUs (or GPU memory shares) the job needs?

Whole-GPU (exclusive) jobs need ``gpus`` healthy idle GPUs of the model.
Shared jobs need ``gpus`` healthy GPUs of the model that are not held
exclusively and have at least ``gpu_memory`` free. Only unhealthy GPUs are
excluded. A node that could not fit the job even if everything on it ended
(too few GPUs of the model, or GPUs too small) is ``UNRESOLVABLE``; one that
is merely busy is ``UNSCHEDULABLE``.

Answered by the capacity index (``scheduler/accel/``) from its buckets, by this exact
class; changing what it checks means changing the index (``accel/test_indexed.py`` fails
until they agree). A new filter needs no such twin: the index runs it on its candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

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
        return capacity_reason(job, closest(job, rejections))


@dataclass(frozen=True, slots=True)
class Closest:
    """What ``GpuCapacity.explain`` says about the nodes it rejected for one job.

    ``ever``: no rejected node is merely busy, so nodes are compared by what
    they could hold if idle. ``single``: exactly one node is compared.
    ``count``/``node``: the most fitting GPUs on one node (now, or ever), ties
    to the lowest name. ``total``: GPUs that fit now, summed over the
    compared nodes (fragmentation: enough in total, too few on any one).
    ``memory``/``memory_node``: for shared jobs whose ``count`` is 0, the
    most free memory on one shareable GPU (or the largest GPU when
    ``ever``), ties to the lowest name.
    """

    ever: bool
    single: bool
    count: int
    node: str
    memory: int = 0
    memory_node: str = ""
    total: int = 0  # fitting GPUs now, summed over the compared nodes


def closest(job: JobRequest, rejections: Sequence[Rejection]) -> Closest:
    """Summarise ``rejections`` (non-empty) for ``capacity_reason``."""
    busy = [r for r in rejections if r.status.code is StatusCode.UNSCHEDULABLE]
    ever = not busy
    considered = rejections if ever else busy
    fits = [(_fit(job, r.node, ever), r.node.name) for r in considered]
    by_count, name = min(fits, key=lambda f: (-f[0].count, f[1]))
    total = sum(_fit(job, r.node, ever=False).count for r in considered)
    result = Closest(ever, len(considered) == 1, by_count.count, name, total=total)
    if job.shared and by_count.count == 0:
        by_memory, memory_node = min(fits, key=lambda f: (-f[0].memory, f[1]))
        return replace(result, memory=by_memory.memory, memory_node=memory_node)
    return result


def capacity_reason(job: JobRequest, closest: Closest) -> PendingReason:
    """The pending reason ``GpuCapacity`` gives for ``job``, worded from ``closest``."""
    if job.shared:
        message, counterfactual = _explain_shared(job, closest)
    else:
        message, counterfactual = _explain_whole(job, closest)
    return PendingReason(GpuCapacity.layer, message, counterfactual)


def _explain_whole(job: JobRequest, fit: Closest) -> tuple[str, str]:
    count, name = fit.count, fit.node
    need = f"needs {_model_gpus(job)}"
    if fit.ever:
        counterfactual = f"needs a node with at least {_model_gpus(job)}"
        if fit.single:
            has = f"only {count}" if count else "none"
            return f"{need}; node {name} has {has}", counterfactual
        if count == 0:
            return f"{need}; no node has any", counterfactual
        return f"{need}; the largest node has {count} ({name})", counterfactual
    missing = job.gpus - count
    counterfactual = f"runs when {missing} more {_noun(missing)} free up on {name}"
    if fit.single:
        return f"{need}; node {name} has {count} free", counterfactual
    if count < fit.total and job.gpus <= fit.total:
        spread = f"{fit.total} {_noun(fit.total)} free in total, but at most {count} on one node"
        return f"{need}; {spread} ({name})", counterfactual
    return f"{need}; the most free on one node is {count} ({name})", counterfactual


def _explain_shared(job: JobRequest, fit: Closest) -> tuple[str, str]:
    assert job.gpu_memory is not None
    size = format_size(job.gpu_memory)
    need = f"needs {size} on {_model_gpus(job)}"
    free = "" if fit.ever else " free"
    count, name = fit.count, fit.node
    if count > 0:  # some GPUs fit, but too few on any one node
        if fit.single:
            message = f"{need}; node {name} has {count} {_noun(count)} with {size}{free}"
        elif not fit.ever and count < fit.total and job.gpus <= fit.total:
            message = (
                f"{need}; {fit.total} {_noun(fit.total)} have {size} free in total, "
                f"but at most {count} on one node ({name})"
            )
        else:
            message = f"{need}; the most GPUs with {size}{free} on one node is {count} ({name})"
    else:
        name = fit.memory_node
        what = "the largest GPU has" if fit.ever else "the most free on one GPU is"
        message = f"{need}; {what} {format_size(fit.memory)} (node {name})"
    if fit.ever:
        return message, f"needs a node with {_model_gpus(job)} of at least {size}"
    missing = job.gpus - count
    verb = "has" if missing == 1 else "have"
    return message, f"runs when {missing} more {_noun(missing)} on {name} {verb} {size} free"
