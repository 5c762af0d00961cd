"""Filter policy: does the node have the GPUs (or GPU memory shares) the job needs?

Whole-GPU (exclusive) jobs need ``gpus`` healthy idle GPUs of the model.
Shared jobs need ``gpus`` healthy GPUs of the model that are not held
exclusively and have at least ``gpu_memory`` free. Only unhealthy GPUs are
excluded. A node that could not fit the job even if everything on it ended
(too few GPUs of the model, or GPUs too small) is ``UNRESOLVABLE``; one that
is merely busy is ``UNSCHEDULABLE``.

It is the capacity model's ``GPUS`` rule (``rules.py``) on the node's ``NodeFit`` for the
job's model class, and declares so (``declarations.NeedsGpus``), with its wording stated
on groups of alike nodes (``word``): an accelerator words a rejection of many nodes from
its buckets with the very function ``explain`` uses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpudock.core.job import PendingReason
from gpudock.core.units import format_size
from gpudock.scheduler.declarations import FitGroup, NeedsGpus
from gpudock.scheduler.framework import SUCCESS, NodeState, Rejection, Status
from gpudock.scheduler.rules import gpu_counts, gpus_ever, gpus_now, model_fit
from gpudock.scheduler.snapshot import JobRequest

LAYER = "devices"


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


def word(job: JobRequest, groups: Sequence[FitGroup], total_nodes: int) -> PendingReason:
    """``GpuCapacity.explain`` of the rejected nodes, given as groups of nodes alike in
    their fit for the job's model class (``declarations.FitGroup``; non-empty)."""
    return capacity_reason(job, closest(job, groups))


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


def closest(job: JobRequest, groups: Sequence[FitGroup]) -> Closest:
    """Summarise the rejected nodes (``groups``, non-empty) for ``capacity_reason``.

    A node is merely busy (``UNSCHEDULABLE``) when its GPUs could ever take the job; the
    busy ones are compared by what fits now, else all by what could ever fit.
    """
    gpus = job.gpus
    busy = [g for g in groups if gpus_ever(job, g[0]) >= gpus]
    ever = not busy
    considered = groups if ever else busy
    by_count: tuple[int, str] | None = None
    by_memory: tuple[int, str] | None = None
    total = single = 0
    for fit, name, count in considered:
        now = gpus_now(job, fit)
        fits = gpus_ever(job, fit) if ever else now
        if by_count is None or (-fits, name) < by_count:
            by_count = (-fits, name)
        held = fit.sizes if ever else fit.frees
        memory = held[0] if held else 0
        if by_memory is None or (-memory, name) < by_memory:
            by_memory = (-memory, name)
        total += now * count
        single += count
    assert by_count is not None and by_memory is not None
    result = Closest(ever, single == 1, -by_count[0], by_count[1], total=total)
    if job.shared and by_count[0] == 0:
        return Closest(ever, single == 1, 0, by_count[1], -by_memory[0], by_memory[1], total)
    return result


def capacity_reason(job: JobRequest, closest: Closest) -> PendingReason:
    """The pending reason ``GpuCapacity`` gives for ``job``, worded from ``closest``."""
    if job.shared:
        message, counterfactual = _explain_shared(job, closest)
    else:
        message, counterfactual = _explain_whole(job, closest)
    return PendingReason(LAYER, message, counterfactual)


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


class GpuCapacity:
    """Rejects nodes without enough free GPUs or GPU memory for the job (layer ``devices``)."""

    name = "gpu_capacity"
    field = "gpus"  # the job field a refusal at submit blames
    layer = LAYER
    declared = NeedsGpus(word)

    def skips(self, job: JobRequest) -> bool:
        """A CPU-only job needs no GPU."""
        return job.gpus == 0

    def filter(self, job: JobRequest, node: NodeState) -> Status:
        if job.gpus == 0:
            return SUCCESS
        ever, now = gpu_counts(job, node)
        if ever < job.gpus:
            what = _status_words(job)[0]
            return Status.unresolvable(self.layer, f"node {node.name} has {ever} {what}")
        if now < job.gpus:
            what = _status_words(job)[1]
            return Status.unschedulable(self.layer, f"node {node.name} has {now} {what}")
        return SUCCESS

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """Name the node that comes closest, with numbers (``word``).

        Only nodes that could ever fit the job are compared, unless none can:
        ``needs 4 GPUs; node gpu-0 has 2 free`` (one such node),
        ``needs 4 GPUs; the most free on one node is 2 (gpu-1)``,
        ``needs 20GiB on 1 GPU; the most free on one GPU is 8GiB (node gpu-0)``,
        ``needs 16 GPUs; the largest node has 8 (gpu-0)`` (none ever fits).
        """
        groups = [(model_fit(job, r.node.gpus), r.node.name, 1) for r in rejections]
        return word(job, groups, total_nodes)
