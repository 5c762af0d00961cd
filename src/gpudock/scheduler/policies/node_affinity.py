"""Filter policy: node selectors, taints and tolerations ("never on this node", ``constraints``).

A node passes when it carries every label of the job's ``node_selector``
and the job tolerates every taint on it (``core/affinity.py``). Labels and
taints do not change while a job waits, so a mismatch is ``UNRESOLVABLE``:
no preemption can help.

Its verdict depends on the node's labels and taints and the job's selector and
tolerations alone (``declarations.NodeOnly``).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from gpudock.core.affinity import Taint, selector_matches, untolerated
from gpudock.core.job import PendingReason
from gpudock.scheduler.declarations import NodeOnly, NodeTraits, TraitRejection
from gpudock.scheduler.framework import SUCCESS, Rejection, Status
from gpudock.scheduler.snapshot import JobRequest

_LISTED = 3
LAYER = "constraints"


def _affinity(job: JobRequest) -> Hashable:
    """What the verdict reads of a job: its node selector and tolerations."""
    return (job.node_selector, job.tolerations)


def selector_text(job: JobRequest) -> str:
    return ", ".join(f"{k}={v}" for k, v in job.node_selector)


def _admits(job: JobRequest, node: NodeTraits) -> Status:
    """``NodeAffinity.filter``: the node's labels and taints against the job's selector and
    tolerations."""
    if job.node_selector and not selector_matches(job.node_selector, node.labels):
        have = dict(node.labels)
        missing = [f"{k}={v}" for k, v in job.node_selector if have.get(k) != v]
        return Status.unresolvable(LAYER, f"node {node.name} lacks label {', '.join(missing)}")
    if node.taints:
        bad = untolerated(node.taints, job.tolerations)
        if bad:
            taints = ", ".join(str(t) for t in bad)
            return Status.unresolvable(LAYER, f"node {node.name} has taint {taints}, not tolerated")
    return SUCCESS


def _word(
    job: JobRequest, rejected: Sequence[TraitRejection], total_nodes: int
) -> PendingReason | None:
    """``NodeAffinity.explain`` of the nodes it rejected (``declarations.TraitRejection``)."""
    if len(rejected) < total_nodes:
        return None
    return affinity_reason(job, [(node.name, node.labels, node.taints) for _, node in rejected])


class NodeAffinity:
    """Rejects nodes lacking a selected label or carrying an untolerated taint."""

    name = "node_affinity"
    field = "node_selector"  # the job field a refusal at submit blames
    layer = LAYER
    declared = NodeOnly(_admits, _word, _affinity)

    def filter(self, job: JobRequest, node: NodeTraits) -> Status:
        return _admits(job, node)

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        """Only when no node at all passes (like ``gpu_model``): which labels or taints.

        ``no node matches node selector zone=eu, and 1 node has taints it does
        not tolerate (gpu-9: dedicated=infra:NoSchedule)``.
        """
        return _word(job, [(r.status, r.node) for r in rejections], total_nodes)


def affinity_reason(
    job: JobRequest,
    nodes: Sequence[tuple[str, tuple[tuple[str, str], ...], tuple[Taint, ...]]],
) -> PendingReason:
    """Why no node (``(name, labels, taints)``, sorted by name) admits ``job``."""
    unlabelled = [n for n, labels, _ in nodes if not selector_matches(job.node_selector, labels)]
    tainted = [
        (n, untolerated(taints, job.tolerations))
        for n, labels, taints in nodes
        if selector_matches(job.node_selector, labels)
    ]
    parts: list[str] = []
    if unlabelled:
        if len(unlabelled) == len(nodes):
            parts.append(f"no node matches node selector {selector_text(job)}")
        else:
            noun = "node does" if len(unlabelled) == 1 else "nodes do"
            parts.append(f"{len(unlabelled)} {noun} not match node selector {selector_text(job)}")
    if tainted:
        listed = "; ".join(f"{n}: {', '.join(str(t) for t in bad)}" for n, bad in tainted[:_LISTED])
        more = f"; and {len(tainted) - _LISTED} more" if len(tainted) > _LISTED else ""
        noun = "node has" if len(tainted) == 1 else "nodes have"
        parts.append(f"{len(tainted)} {noun} taints it does not tolerate ({listed}{more})")
    hints: list[str] = []
    if unlabelled:
        hints.append(f"label a node {selector_text(job)} or change the selector")
    if tainted:
        keys = sorted({t.key for _, bad in tainted for t in bad})
        hints.append(f"add a toleration for {', '.join(keys)}")
    return PendingReason(NodeAffinity.layer, ", and ".join(parts), "; or ".join(hints))
