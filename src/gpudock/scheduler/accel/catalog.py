"""The capacity index's classes, built from parts that classes share (``indexed.py`` reads them).

A job's *class* is the GPU models its model constraint matches plus its
node affinity (``Catalog.model_class``). A class's available members are
kept in one or more ``Part``s, each a ``ClassIndex`` (``index.py``) caught
up with ``CycleState.changes`` when read:

* a class without node affinity (no node selector, no tainted node in the
  cluster) is the union of shared parts: one per GPU product name, over the
  available nodes whose GPUs all carry that name (the usual node), plus a
  part of its own for the few others (no GPUs, mixed products), summarised
  for the class. ``ANY_MODEL``, ``H100`` and ``A100`` jobs then read the
  same per-product parts: each part is built once per cycle, and a
  reservation moves a node in one part's buckets, whatever the number of
  classes that contain it;
* a class with node affinity keeps one part of its own: the nodes it admits.

A node of a product's part has the same fit in every class that contains it
(``class_fit`` of a one-product node is its ``ANY_MODEL`` fit), so a class's
best node is the best of its parts' best nodes, and its buckets are the
union of theirs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from operator import attrgetter

from gpudock.core.affinity import Toleration
from gpudock.core.job import PendingReason
from gpudock.scheduler.accel.index import (
    ANY_MODEL,
    PRICED,
    ClassIndex,
    ModelClass,
    NodeFit,
    class_fit,
)
from gpudock.scheduler.capacity import CycleState, model_name_matches
from gpudock.scheduler.equivalence import constraints_reason
from gpudock.scheduler.framework import Status
from gpudock.scheduler.policies.gpu_model import GpuModel
from gpudock.scheduler.policies.node_affinity import NodeAffinity, admits, affinity_reason
from gpudock.scheduler.snapshot import JobRequest

Affinity = tuple[tuple[tuple[str, str], ...], tuple[Toleration, ...]]
ClassKey = tuple[ModelClass, Affinity]

_taints = attrgetter("taints")  # ``any(map(...))`` runs no Python frame per node

Group = tuple[tuple[int, ...], tuple[int, ...], str, int]
"""Available members with equal ``(frees, sizes)``: those, the lowest name, how many."""


@dataclass(slots=True)
class Part:
    """Some available members of one or more classes, indexed by free capacity.

    ``members`` is the model class their fits summarise (``ANY_MODEL`` for a
    product's part); ``seen`` counts the entries of ``CycleState.changes``
    applied to ``index``.
    """

    index: ClassIndex
    members: ModelClass
    seen: int


@dataclass(slots=True)
class ModelClassIndex:
    """One class: its parts (disjoint; together its available members), its unavailable
    members by name, and how many nodes its node affinity rules out."""

    members: ModelClass
    parts: tuple[Part, ...]
    down: list[tuple[str, str | None]]
    excluded: int  # nodes the job's node affinity rules out
    _groups: tuple[tuple[int, ...], list[Group]] | None = None  # (parts' versions, groups)

    def has_members(self) -> bool:
        """True when some available node is in the class."""
        return any(part.index.fits for part in self.parts)

    def groups(self) -> list[Group]:
        """``shared_groups`` of the available members, recomputed only after a change."""
        versions = tuple(part.index.version for part in self.parts)
        if self._groups is None or self._groups[0] != versions:
            fits = (item for part in self.parts for item in part.index.fits.items())
            self._groups = (versions, shared_groups(fits))
        return self._groups[1]


@dataclass(slots=True)
class CatalogMemo:
    """What a ``Catalog`` keeps for the next cycle of the same caller (``SchedulerSession``):
    the products' indexes of the latest cycle, by product and scorer sign, that the
    next cycle brings up to date instead of building anew (``Catalog._reuse``)."""

    indexes: dict[tuple[str, int], ClassIndex] = field(default_factory=dict)


class Catalog:
    """The classes in use this cycle and the parts they share, over ``CycleState.fit``.

    With a ``memo``, the products' indexes start from those of the previous
    cycle given the same memo (``_reuse``); without one, they are built anew.
    """

    def __init__(self, state: CycleState, sign: int, memo: CatalogMemo | None = None) -> None:
        self._memo = memo if memo is not None else CatalogMemo()
        self._state = state
        self._sign = sign
        self._gpu_names: frozenset[str] | None = None
        self._models: dict[str, frozenset[str]] = {}
        self._classes: dict[ClassKey, ModelClassIndex] = {}
        self._tainted = any(map(_taints, state.views.values()))
        self._products: dict[str, Part] | None = None  # by product name; see ``_split``
        self._kept: dict[tuple[str, int], ClassIndex] = {}  # for the next cycle (``_reuse``)
        self._others: list[str] = []  # available nodes in no product's part
        self._unavailable: list[str] = []

    @property
    def node_count(self) -> int:
        return len(self._state.views)

    @property
    def gpu_names(self) -> frozenset[str]:
        """Every GPU product name in the snapshot."""
        if self._gpu_names is None:
            names: set[str] = set()
            fit = self._state.fit
            for name, view in self._state.views.items():
                only = fit(name).only_name  # the name of all its GPUs, if they share one
                if only is not None:
                    names.add(only)
                else:
                    names.update(g.name for g in view.gpus)
            self._gpu_names = frozenset(names)
        return self._gpu_names

    def model_class(self, job: JobRequest) -> ModelClassIndex:
        """The class ``job`` asks for (GPU models, node affinity), built once."""
        members = self._members(job)
        affinity: Affinity = (
            job.node_selector,
            job.tolerations if self._tainted else (),
        )
        key = (members, affinity)
        return self._classes.get(key) or self._add_class(key, job)

    def catch_up(self, klass: ModelClassIndex) -> int:
        """Re-summarise in ``klass``'s parts the nodes reserved on since each last caught up.

        Each part catches up only when read, so one that few jobs read
        re-summarises a node once however often it changed. Returns how many
        changes every part of ``klass`` has applied (all of them).
        """
        state = self._state
        changes = state.changes
        count = len(changes)
        for part in klass.parts:
            seen = part.seen
            if seen == count:
                continue
            index, members = part.index, part.members
            fresh = changes[-1:] if seen == count - 1 else set(changes[seen:])
            for name in fresh:
                if name in index.fits:
                    fit = state.fit(name)
                    if members is not ANY_MODEL:
                        fit = class_fit(fit, state.nodes[name].gpus, members)
                    index.update(name, fit)
            part.seen = count
        return count

    def _members(self, job: JobRequest) -> ModelClass:
        """The GPU names ``job``'s model constraint matches; ``ANY_MODEL`` when none applies."""
        model = job.gpu_model
        if model is None or job.gpus == 0:
            return ANY_MODEL
        members = self._models.get(model)
        if members is None:
            names = (n for n in self.gpu_names if model_name_matches(model, n))
            members = self._models[model] = frozenset(names)
        return members

    def _add_class(self, key: ClassKey, job: JobRequest) -> ModelClassIndex:
        members, affinity = key
        if self._tainted or affinity[0]:
            klass = self._own_class(members, job)
        else:
            klass = self._shared_class(members)
        self._classes[key] = klass
        return klass

    def _split(self) -> dict[str, Part]:
        """The products' parts (built once): available nodes by the product name of all their
        GPUs; the other nodes are listed in ``_others`` and ``_unavailable``."""
        if self._products is None:
            by_product: dict[str, dict[str, NodeFit]] = {}
            views = self._state.views.items()
            for (name, view), fit in zip(views, self._state.fit_all(), strict=True):
                only = fit.only_name
                if not view.available:
                    self._unavailable.append(name)
                elif only is None:
                    self._others.append(name)  # no GPUs, or several products
                else:
                    fits = by_product.get(only)
                    if fits is None:
                        by_product[only] = {name: fit}
                    else:
                        fits[name] = fit
            seen = len(self._state.changes)
            self._products = {
                product: Part(self._reuse(product, fits), ANY_MODEL, seen)
                for product, fits in sorted(by_product.items())
            }
            self._memo.indexes = self._kept
        return self._products

    def _reuse(self, product: str, fits: dict[str, NodeFit]) -> ClassIndex:
        """A copy of the last cycle's index of ``product`` (kept in the memo), brought to
        ``fits``; a new one when the product's available nodes are not the same.

        The kept index is taken out of the memo while it is brought up to
        date (a concurrent cycle builds its own), and moves only the nodes
        whose fit is not the very same summary (``CycleState.fit`` returns
        the same object for a GPU tuple it has seen in the last cycle); when
        more than a quarter changed (a caller that builds fresh views every
        cycle), a new index is built instead. Its
        buckets are then those a new index of ``fits`` would have, so the
        Plan is the same; the shared and priced structures asked for last
        time are built ahead, and the cycle works on a copy.
        """
        key = (product, self._sign)
        kept = self._memo.indexes.pop(key, None)
        if kept is None or kept.fits.keys() != fits.keys():
            kept = ClassIndex(fits, self._sign)
        else:
            old = kept.fits
            changed = [name for name, fit in fits.items() if old[name] is not fit]
            if len(changed) > len(fits) // 4:  # fresh views: building beats moving them all
                shapes, kept = kept.shapes, ClassIndex(fits, self._sign)
                kept.shapes = shapes
            else:
                for name in changed:
                    kept.update(name, fits[name])
        for gpus in list(kept.shapes):
            if gpus == PRICED:
                kept.priced()
            else:
                kept.shared(gpus)
        self._kept[key] = kept
        return kept.copy()

    def _shared_class(self, members: ModelClass) -> ModelClassIndex:
        """A class without node affinity: the parts of its products, and one of its own for the
        available nodes in no product's part that have GPUs of the class (or any, for
        ``ANY_MODEL``)."""
        products = self._split()
        parts = [p for name, p in products.items() if members is None or name in members]
        state, base = self._state, self._state.fit
        gpus_of = state.nodes.gpus_of
        fits: dict[str, NodeFit] = {}
        for name in self._others:
            fit = base(name)
            if members is not None:
                fit = class_fit(fit, gpus_of(name), members)
                if fit.total == 0:
                    continue  # no GPU of the model: gpu_model rejects it
            fits[name] = fit
        if fits:
            parts.append(Part(ClassIndex(fits, self._sign), members, len(state.changes)))
        down: list[tuple[str, str | None]] = []
        for name in self._unavailable:
            if members is not None:
                fit = base(name)
                if fit.only_name is not None or fit.total == 0:  # ``class_fit``'s fast path
                    if fit.only_name not in members:
                        continue
                elif class_fit(fit, gpus_of(name), members).total == 0:
                    continue
            down.append((name, state.views[name].unavailable_reason))
        return ModelClassIndex(members, tuple(parts), sorted(down), 0)

    def _own_class(self, members: ModelClass, job: JobRequest) -> ModelClassIndex:
        """A class with node affinity: one part of its own, over the nodes it admits."""
        fits: dict[str, NodeFit] = {}
        down: list[tuple[str, str | None]] = []
        excluded = 0
        gpus_of = self._state.nodes.gpus_of
        base = self._state.fit
        for name, view in self._state.views.items():
            if not admits(job, view.labels, view.taints):
                excluded += 1
                continue  # node_affinity rejects it
            fit = base(name)
            if members is not None:  # a model class
                if fit.only_name is not None or fit.total == 0:  # ``class_fit``'s fast path
                    if fit.only_name not in members:
                        continue  # no GPU of the model: gpu_model rejects it
                else:
                    fit = class_fit(fit, gpus_of(name), members)
                    if fit.total == 0:
                        continue
            if view.available:
                fits[name] = fit
            else:
                down.append((name, view.unavailable_reason))
        part = Part(ClassIndex(fits, self._sign), members, len(self._state.changes))
        return ModelClassIndex(members, (part,), sorted(down), excluded)

    def constraints_reason(self, job: JobRequest) -> PendingReason:
        """``equivalence.constraints_reason`` from each node's first constraint rejection."""
        statuses: list[Status] = []
        for name in sorted(self._state.views):
            node = self._state.nodes[name]
            status = NodeAffinity().filter(job, node)
            statuses.append(status if not status.ok else GpuModel().filter(job, node))
        return constraints_reason(statuses)

    def affinity_reason(self, job: JobRequest) -> PendingReason:
        """``node_affinity``'s reason when it rules out every node."""
        views = sorted(self._state.views.values(), key=lambda v: v.name)
        return affinity_reason(job, [(v.name, v.labels, v.taints) for v in views])


def shared_groups(fits: Iterable[tuple[str, NodeFit]]) -> list[Group]:
    """Group nodes that every shared job sees alike (``GpuCapacity`` reads only these)."""
    first: dict[tuple[tuple[int, ...], tuple[int, ...]], list[str]] = {}
    count: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    for name, fit in fits:
        key = (fit.frees, fit.sizes)
        names = first.get(key)
        if names is None:
            first[key], count[key] = [name], 1
        else:
            count[key] += 1
            if name < names[0]:
                names[0] = name
    return [(frees, sizes, first[frees, sizes][0], n) for (frees, sizes), n in count.items()]
