"""The capacity index's classes of nodes, built from parts that classes share.

A job's *class* is the nodes that every node-only filter it needs admits
(``declarations.NodeOnly``, ``node_only.py``), summarised for the GPUs the capacity
model counts for it (``rules.model_class``), in one or more ``Part``s, each a
``ClassIndex`` (``index.py``) caught up with ``CycleState.changes`` when read. The nodes
the job-independent node-only filters admit (key None, as ``node_health``) whose GPUs
all carry one product name are split by product into parts every class may share; a
class takes a product's part whole when none of its own verdicts rejects a node of it
and its model class holds the product, leaves out a part rejected whole, and keeps a
part of its own for the rest. So ``ANY_MODEL``, ``H100`` and ``A100`` jobs read the same
per-product parts, each built once per cycle, and a class's best node is the best of
its parts' best nodes. A class keeps each node-only filter's rejections as the
verdicts give them (``node_only.py``), and set operations on their names split the
parts; only when step 4 words them is each node listed, with its status, under the first
such filter in profile order (``ModelClassIndex.rejected``).
"""

from __future__ import annotations

from collections.abc import Iterable, Set
from dataclasses import dataclass, field

from gpudock.core.job import PendingReason
from gpudock.scheduler.accel.declared import JobFilters
from gpudock.scheduler.accel.index import PRICED, ClassIndex
from gpudock.scheduler.accel.node_only import NodeOnlyVerdicts, Rejected, names
from gpudock.scheduler.capacity import CycleState, model_name_matches
from gpudock.scheduler.declarations import FitGroup, NodeOnly
from gpudock.scheduler.node_fit import ANY_MODEL, ModelClass, NodeFit, class_fit
from gpudock.scheduler.snapshot import JobRequest

Verdicts = tuple[tuple[int, Rejected], ...]  # node-only filters' rejections, by position
ClassKey = tuple[ModelClass, tuple[object, ...], bool]


@dataclass(slots=True)
class Part:
    """Members of one or more classes by free capacity: ``members``, the model class their
    fits summarise (``ANY_MODEL`` for a product's part); ``seen``, the changes applied."""

    index: ClassIndex
    members: ModelClass
    seen: int


@dataclass(slots=True)
class ModelClassIndex:
    """One class: its parts (disjoint; together its members, the nodes every node-only
    filter admits) and the rejections of the node-only filters it needs (``verdicts``,
    by position in the profile)."""

    members: ModelClass
    parts: tuple[Part, ...]
    verdicts: Verdicts
    _rejected: dict[int, Rejected] | None = None  # ``rejected``, once worked out
    _groups: tuple[tuple[int, ...], list[FitGroup]] | None = None  # (parts' versions, groups)
    worded: list[PendingReason] | None = None  # the node-only filters' reasons (``reasons.py``)

    def has_members(self) -> bool:
        """True when some node is in the class."""
        return any(part.index.fits for part in self.parts)

    def rejected(self) -> dict[int, Rejected]:
        """Per node-only filter (by position), the nodes it is the first to reject, with its
        status (the filter's own mapping where no earlier filter rejects any of them)."""
        if self._rejected is None:
            self._rejected = {}
            earlier: list[Rejected] = []
            for position, rejected in sorted(self.verdicts, key=_position):
                taken = {n for before in earlier for n in before.keys() & rejected.keys()}
                first = {n: s for n, s in rejected.items() if n not in taken} if taken else rejected
                if first:
                    self._rejected[position] = first
                    earlier.append(first)
        return self._rejected

    def groups(self) -> list[FitGroup]:
        """``shared_groups`` of the members, recomputed only after a change."""
        versions = tuple(part.index.version for part in self.parts)
        if self._groups is None or self._groups[0] != versions:
            fits = (item for part in self.parts for item in part.index.fits.items())
            self._groups = (versions, shared_groups(fits))
        return self._groups[1]


@dataclass(slots=True)
class CatalogMemo:
    """The products' indexes of the latest cycle, by product and scorer sign, that the
    caller's next cycle brings up to date instead of building anew (``Catalog._reuse``)."""

    indexes: dict[tuple[str, int], ClassIndex] = field(default_factory=dict)


class Catalog:
    """The classes in use this cycle and the parts they share, over ``CycleState.fit``.
    ``base``: the node-only filters without a key (``(position, declared)``), applied to
    the shared parts."""

    def __init__(
        self,
        state: CycleState,
        sign: int,
        verdicts: NodeOnlyVerdicts,
        base: tuple[tuple[int, NodeOnly], ...],
        memo: CatalogMemo | None = None,
    ) -> None:
        self._memo = memo if memo is not None else CatalogMemo()
        self._state = state
        self._sign = sign
        self._verdicts = verdicts
        self._base = base
        self._gpu_names: frozenset[str] | None = None
        self._models: dict[str, frozenset[str]] = {}
        self._classes: dict[ClassKey, ModelClassIndex] = {}
        self._products: dict[str, Part] | None = None  # by product name; see ``_split``
        self._product_of: dict[str, str] = {}  # node -> its product's part
        self._kept: dict[tuple[str, int], ClassIndex] = {}  # for the next cycle (``_reuse``)
        self._others: list[str] = []  # admitted nodes in no product's part
        self._down: Verdicts = ()  # the ``base`` filters' rejections

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

    def model_class(self, job: JobRequest, filters: JobFilters) -> ModelClassIndex:
        """The class of ``job``, which needs ``filters`` (its model class, if a ``GPUS``
        rule applies; its node-only verdicts), built once per cycle. Jobs whose node-only
        filters give the same rejections share one class, whatever their keys: a filter's
        rejections for a key are one mapping for the cycle (``NodeOnlyVerdicts``), so the
        class is keyed by the identity of the non-empty ones (the class holds them, so no
        other mapping takes their identity while it is kept)."""
        members = self._members(job) if filters.gpus else ANY_MODEL
        whole = sum(1 for _, _, d in filters.node_only if d.key is None) == len(self._base)
        # whole: the shared parts apply the filters without a key, the class the others
        chosen = [(i, d) for i, _, d in filters.node_only if not whole or d.key is not None]
        own = self._rejections(chosen, job)
        key = (members, tuple((i, id(rejected)) for i, rejected in own if rejected), whole)
        found = self._classes.get(key)
        if found is None:
            if whole:
                found = self._shared_class(members, own, job)
            else:  # the job skips a filter the shared parts apply: a class of its own
                found = self._own_class(members, own)
            self._classes[key] = found
        return found

    def catch_up(self, klass: ModelClassIndex) -> int:
        """Re-summarise in ``klass``'s parts the nodes reserved on since each last caught up
        (once however often a node changed); returns how many changes they applied."""
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

    def _split(self, job: JobRequest) -> dict[str, Part]:
        """The products' parts (built once): the nodes the ``base`` filters admit, by the
        product name of all their GPUs; the others are listed in ``_others`` and the
        rejected ones in ``_down``. ``job``: any job (the ``base`` verdicts do not read it)."""
        if self._products is None:
            rejected = self._verdicts.rejected
            self._down = tuple((i, rejected(i, declared, job)) for i, declared in self._base)
            by_product: dict[str, dict[str, NodeFit]] = {}
            down, product_of = _names(self._down), self._product_of
            views = self._state.views
            for name, fit in zip(views, self._state.fit_all(), strict=True):
                only = fit.only_name
                if name in down:
                    continue
                if only is None:
                    self._others.append(name)  # no GPUs, or several products
                    continue
                product_of[name] = only
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
        """A copy of the last cycle's index of ``product`` brought to ``fits`` (a new one
        when the product's nodes are not the same ones).

        The kept index is taken out of the memo meanwhile (a concurrent cycle
        builds its own) and moves only the nodes whose fit is not the very same
        summary (``CycleState.fit`` reuses them); past a quarter of them, a new
        one is built. Its buckets are those a new index would have, so the Plan
        is the same; the structures asked for last time are built ahead.
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

    def _rejections(self, filters: Iterable[tuple[int, NodeOnly]], job: JobRequest) -> Verdicts:
        """The rejections of the node-only ``filters`` (by position) for ``job``."""
        rejected = self._verdicts.rejected
        return tuple(
            (position, rejected(position, declared, job)) for position, declared in filters
        )

    def _shared_class(
        self, members: ModelClass, own_verdicts: Verdicts, job: JobRequest
    ) -> ModelClassIndex:
        """A class over the shared parts (module doc), less what ``own_verdicts`` (the
        job's keyed node-only filters) reject."""
        products = self._split(job)
        rejected = _names(own_verdicts)  # the split left out what ``base`` rejects
        parts: list[Part] = []
        own: list[str] = [n for n in self._others if n not in rejected]
        for product, part in products.items():
            names = part.index.fits.keys()
            if not rejected or names.isdisjoint(rejected):
                if members is None or product in members:
                    parts.append(part)
                else:  # a product the capacity model does not count
                    own.extend(names)
            elif not names <= rejected:  # partly rejected (wholly: left out)
                own.extend(n for n in names if n not in rejected)
        if own:
            parts.append(self._own_part(sorted(own), members))
        return ModelClassIndex(members, tuple(parts), self._down + own_verdicts)

    def _own_class(self, members: ModelClass, verdicts: Verdicts) -> ModelClassIndex:
        """A class of its own over every node (a job that skips a ``base`` filter), less
        what ``verdicts`` (every node-only filter it needs) reject."""
        rejected = _names(verdicts)
        own = [name for name in self._state.views if name not in rejected]
        parts = (self._own_part(own, members),) if own else ()
        return ModelClassIndex(members, parts, verdicts)

    def _own_part(self, names: list[str], members: ModelClass) -> Part:
        """A part of the nodes ``names``, summarised for ``members``."""
        state = self._state
        fits: dict[str, NodeFit] = {}
        for name in names:
            fit = state.fit(name)
            if members is not None:
                fit = class_fit(fit, state.nodes.gpus_of(name), members)
            fits[name] = fit
        return Part(ClassIndex(fits, self._sign), members, len(state.changes))


def _position(verdict: tuple[int, Rejected]) -> int:
    return verdict[0]


def _names(verdicts: Verdicts) -> Set[str]:
    """The nodes some of ``verdicts`` rejects."""
    return names(rejected for _, rejected in verdicts)


def shared_groups(fits: Iterable[tuple[str, NodeFit]]) -> list[FitGroup]:
    """Nodes that every shared job sees alike (the same ``frees`` and ``sizes``: what the
    ``GPUS`` rule reads for a share): a member's fit, the lowest name, how many."""
    first: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[NodeFit, str]] = {}
    count: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    for name, fit in fits:
        key = (fit.frees, fit.sizes)
        found = first.get(key)
        if found is None:
            first[key], count[key] = (fit, name), 1
        else:
            count[key] += 1
            if name < found[1]:
                first[key] = (fit, name)
    return [(fit, name, count[key]) for key, (fit, name) in first.items()]
