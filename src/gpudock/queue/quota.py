"""Admission against quotas: guarantees, limits, borrowing and lending.

For each governed resource (``QueueSet.tracked``), with ``u`` the queue's
usage (running plus admitted this cycle), ``x`` the job's request and ``g``,
``l`` the queue's guarantee and limit, a job is admitted when, for every
resource, either

1. ``u + x <= g``: within the guarantee, always admitted (quota-wise: if
   borrowers hold the capacity, reclaiming it is preemption's business); or
2. the queue may borrow, ``u + x <= l``, and its lending group can lend
   the part above ``g``.

Lending budget. A cohort lends the unused guarantee of its lending members,
``L = sum max(0, g - u)``, and every group may also draw on the cluster's
unguaranteed capacity ``U = max(0, C - sum of all guarantees)``. With
``B = sum max(0, u - g)`` a group's borrowing, the invariant kept by every
borrowing admission is::

    sum over groups of max(0, B - L)  <=  U

so borrowing never takes capacity that is guaranteed to another cohort, and
when ``U = 0`` a cohort borrows at most what its members lend. A queue
without a cohort lends to nobody and borrows only from ``U``.

``check_admission`` is the pure rule; ``QuotaLedger`` is the per-cycle
mutable usage that feeds it in O(1) per job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from gpudock.core.job import PendingReason
from gpudock.queue.model import Queue, QueueSet
from gpudock.queue.resources import (
    RESOURCES,
    ZERO,
    Quantity,
    Resource,
    Resources,
    amount,
    bare,
    ratio,
)

LAYER = "quota"

Refusal = Literal["undeclared", "guarantee", "limit", "lending"]
"""Which rule refused a job: its queue is not declared; it would pass the guarantee of a
queue that may not borrow; it would pass the queue's limit; or its lending group cannot
lend what it would borrow."""


@dataclass(frozen=True, slots=True)
class Admission:
    """The quota verdict for one job.

    ``borrows``: the job takes borrowed capacity (in some governed resource
    it requests, its queue ends above its guarantee), so it may be reclaimed
    later. ``reason`` is set exactly when not ``admitted``, and so are
    ``refusal`` (the rule) and ``resource`` (None for an undeclared queue).
    """

    admitted: bool
    borrows: bool = False
    reason: PendingReason | None = None
    refusal: Refusal | None = None
    resource: Resource | None = None


@dataclass(frozen=True, slots=True)
class LendingBalance:
    """What one lending group can lend, as seen by a queue in it.

    ``borrowed`` is the group's ``B``, ``lendable`` its ``L``; ``pool_free``
    is ``U`` minus the other groups' ``max(0, B - L)`` (negative when other
    groups are over-lent, e.g. while a lender takes its guarantee back).
    """

    borrowed: Resources
    lendable: Resources
    pool_free: Resources


def check_admission(
    queue: Queue,
    used: Resources,
    request: Resources,
    balance: LendingBalance,
    tracked: frozenset[Resource],
) -> Admission:
    """Admit ``request`` into ``queue`` whose usage is ``used``, or say why not.

    Pure: reads only its arguments. Resources are checked in ``RESOURCES``
    order and the first refusal is the reason (layer ``quota``).
    """
    if not queue.declared:
        return Admission(False, reason=_undeclared(queue), refusal="undeclared")
    borrows = False
    for resource in RESOURCES:
        if resource not in tracked:
            continue
        refused = _refusal(queue, resource, used, request, balance)
        if refused is not None:
            rule, reason = refused
            return Admission(False, reason=reason, refusal=rule, resource=resource)
        wanted = request.get(resource)
        borrows = borrows or (
            wanted > 0 and used.get(resource) + wanted > queue.guarantee.get(resource)
        )
    return Admission(True, borrows=borrows)


def _refusal(
    queue: Queue, resource: Resource, used: Resources, request: Resources, balance: LendingBalance
) -> tuple[Refusal, PendingReason] | None:
    """Which rule refuses ``request`` in ``queue`` for ``resource``, and why; None when it fits.

    A job is never refused on a resource it does not ask for, even when its
    queue is over quota there (after a config change or a reclaim).
    """
    if _within_guarantee(queue, resource, used, request):
        return None
    u, x = used.get(resource), request.get(resource)
    g, limit = queue.guarantee.get(resource), queue.limit.get(resource)
    if not queue.borrow:
        return "guarantee", _borrowing_disabled(queue, resource, u, x)
    if limit is not None and u + x > limit:
        return "limit", _over_limit(queue, resource, u, x, limit)
    wants = u + x - max(u, g)
    others = lendable_to(queue, resource, used, balance)
    if wants > others:
        return "lending", _nothing_to_lend(queue, resource, wants, others, balance)
    return None


def lendable_to(
    queue: Queue, resource: Resource, used: Resources, balance: LendingBalance
) -> Quantity:
    """What ``queue``'s lending group (and the cluster's unguaranteed pool) can lend it
    beyond its own guarantee in ``resource``, its usage being ``used``."""
    u, g = used.get(resource), queue.guarantee.get(resource)
    own_unused = max(ZERO, g - u) if queue.lend else ZERO
    return _lendable_to(balance, resource, own_unused)


def _lendable_to(balance: LendingBalance, resource: Resource, own_unused: Quantity) -> Quantity:
    """How much more the group (and the pool) can lend, not counting the queue's own guarantee."""
    pool = balance.pool_free.get(resource)
    if pool < 0:
        return ZERO
    slack = balance.lendable.get(resource) - own_unused - balance.borrowed.get(resource)
    return max(ZERO, slack + pool)


def _borrowing_disabled(
    queue: Queue, resource: Resource, u: Quantity, x: Quantity
) -> PendingReason:
    g = queue.guarantee.get(resource)
    if u >= g:
        where = "at" if u == g else "over"
        message = f"queue {queue.name} {where} quota {ratio(resource, u, g)}; borrowing disabled"
    else:
        message = (
            f"queue {queue.name} would exceed its guarantee ({ratio(resource, u, g)} in use, "
            f"job needs {bare(resource, x)}); borrowing disabled"
        )
    if x <= g:
        hint = f"runs once queue {queue.name} uses at most {amount(resource, g - x)}"
    else:
        hint = (
            f"the job needs {amount(resource, x)}, more than queue {queue.name}'s guarantee "
            f"of {amount(resource, g)}: raise the guarantee or allow the queue to borrow"
        )
    return PendingReason(LAYER, message, hint)


def _over_limit(
    queue: Queue, resource: Resource, u: Quantity, x: Quantity, limit: Quantity
) -> PendingReason:
    message = (
        f"queue {queue.name} would exceed its limit ({ratio(resource, u, limit)} in use, "
        f"job needs {bare(resource, x)})"
    )
    if x <= limit:
        hint = f"runs once queue {queue.name} uses at most {amount(resource, limit - x)}"
    else:
        hint = (
            f"the job needs {amount(resource, x)}, more than queue {queue.name}'s limit "
            f"of {amount(resource, limit)}: it can never run in this queue"
        )
    return PendingReason(LAYER, message, hint)


def _nothing_to_lend(
    queue: Queue, resource: Resource, wants: Quantity, others: Quantity, balance: LendingBalance
) -> PendingReason:
    """The lending group cannot lend ``wants``; ``others`` is what it can lend."""
    short = amount(resource, wants - others)
    borrowed, pool = balance.borrowed.get(resource), balance.pool_free.get(resource)
    if queue.cohort is not None:
        lender, what, whom = f"cohort {queue.cohort}", "unused capacity to lend", ""
        spent = f"borrowed {amount(resource, borrowed)}"
        hint = (
            f"runs once cohort {queue.cohort} can lend {short} more "
            "(a member uses less of its guarantee, or a borrower finishes)"
        )
    else:
        lender, what = "the cluster", "unguaranteed capacity left"
        whom, spent = f" to lend queue {queue.name}", f"it borrowed {amount(resource, borrowed)}"
        hint = (
            f"runs once the cluster can lend {short} more (a borrower finishes); "
            "a queue in a cohort may also borrow its members' unused guarantees"
        )
    if pool < 0:
        spent += f"; other cohorts borrowed {amount(resource, -pool)} more than can be lent"
    if others <= 0:
        message = f"{lender} has no {what}{whom} ({spent})"
    else:
        message = (
            f"{lender} has only {amount(resource, others)} of {what}{whom}, "
            f"job would borrow {bare(resource, wants)} ({spent})"
        )
    return PendingReason(LAYER, message, hint)


def _undeclared(queue: Queue) -> PendingReason:
    return PendingReason(
        LAYER,
        f"queue {queue.name} does not exist",
        "resubmit to a declared queue, or declare it under queues.queues in the server config",
    )


class QuotaLedger:
    """Per-queue usage during one cycle, with each lending group's balance kept current.

    Built from the usage of running jobs; ``charge`` adds what the cycle
    admits. ``check`` never mutates the usage; ``charge`` is the only
    mutation. Both cost O(governed resources), and a ``check`` repeated
    between two charges (jobs of one queue and one shape) is answered from a
    memo that ``charge`` empties. ``version`` moves with every charge. Never
    mutates the ``QueueSet`` or the mapping it was given.
    """

    def __init__(
        self, queues: QueueSet, capacity: Resources, usage: Mapping[str, Resources] | None = None
    ) -> None:
        self.queues = queues
        self.capacity = capacity
        self._tracked = tuple(r for r in RESOURCES if r in queues.tracked)
        self._unguaranteed = queues.unguaranteed(capacity)
        self._known: dict[str, Queue] = dict(queues.queues)
        self._usage: dict[str, Resources] = {}
        self._borrowed: dict[str, dict[Resource, Quantity]] = {}  # B per group
        self._lendable: dict[str, dict[Resource, Quantity]] = {}  # L per group
        self._overflow: dict[Resource, Quantity] = dict.fromkeys(self._tracked, ZERO)
        self._checks: dict[tuple[str, Resources], Admission] = {}  # since the last charge
        self.version = 0  # moves with every charge
        for queue in queues:
            for resource in self._tracked:
                self._shift(queue.group, resource, ZERO, queue.lendable(Resources()).get(resource))
        for name, used in sorted((usage or {}).items()):
            self.charge(name, used)

    def usage(self, queue: str) -> Resources:
        """Usage of ``queue``: running jobs plus everything charged this cycle."""
        return self._usage.get(queue, _NOTHING)

    def usages(self) -> dict[str, Resources]:
        """Every queue's usage (declared queues and any others charged), by name."""
        return {q.name: self.usage(q.name) for q in self.queues} | dict(self._usage)

    def balance(self, queue: str) -> LendingBalance:
        """The lending balance of ``queue``'s group in governed resources (0 in others)."""
        group = self._queue(queue).group
        b_row, l_row = self._borrowed.get(group, {}), self._lendable.get(group, {})
        pool: dict[Resource, Quantity] = {}
        for resource in self._tracked:
            own_spill = max(ZERO, b_row.get(resource, ZERO) - l_row.get(resource, ZERO))
            others = self._overflow[resource] - own_spill
            pool[resource] = self._unguaranteed.get(resource) - others
        return LendingBalance(_resources(b_row), _resources(l_row), _resources(pool))

    def overflow(self) -> Resources:
        """``sum over groups of max(0, B - L)`` in governed resources (0 in others).

        At most ``U`` after any borrowing admission; above it while lenders
        take back capacity that was lent (reclaim needed).
        """
        return _resources(self._overflow)

    def check(self, queue: str, request: Resources) -> Admission:
        """Would ``request`` be admitted into ``queue`` now? Never mutates the usage."""
        key = (queue, request)
        found = self._checks.get(key)
        if found is None:
            found = self._checks[key] = self._check(queue, request)
        return found

    def _check(self, queue: str, request: Resources) -> Admission:
        q, used = self._queue(queue), self.usage(queue)
        if q.declared and all(_within_guarantee(q, r, used, request) for r in self._tracked):
            return _ADMITTED  # the common case: no lending balance needed
        return check_admission(q, used, request, self.balance(queue), self.queues.tracked)

    def charge(self, queue: str, usage: Resources) -> None:
        """Add ``usage`` to ``queue`` (an admitted job's exact usage, or running jobs')."""
        self._checks.clear()
        self.version += 1
        q = self._queue(queue)
        before = self.usage(queue)
        after = before + usage
        self._usage[queue] = after
        for resource in self._tracked:
            if usage.get(resource):
                borrowed, lent = _deltas(q, before.get(resource), after.get(resource), resource)
                self._shift(q.group, resource, borrowed, lent)

    def _queue(self, name: str) -> Queue:
        queue = self._known.get(name)
        if queue is None:
            queue = self._known[name] = self.queues.get(name)
        return queue

    def _shift(self, group: str, resource: Resource, borrowed: Quantity, lent: Quantity) -> None:
        """Move ``group``'s B and L in ``resource`` by the deltas, keeping the overflow in step."""
        b_row, l_row = self._borrowed.setdefault(group, {}), self._lendable.setdefault(group, {})
        old_b, old_l = b_row.get(resource, ZERO), l_row.get(resource, ZERO)
        new_b, new_l = old_b + borrowed, old_l + lent
        b_row[resource], l_row[resource] = new_b, new_l
        spill = max(ZERO, new_b - new_l) - max(ZERO, old_b - old_l)
        self._overflow[resource] = self._overflow[resource] + spill


_NOTHING = Resources()
_ADMITTED = Admission(True)


def _within_guarantee(
    queue: Queue, resource: Resource, used: Resources, request: Resources
) -> bool:
    """The request adds nothing above the guarantee in ``resource``."""
    x = request.get(resource)
    return x <= 0 or used.get(resource) + x <= queue.guarantee.get(resource)


def _deltas(
    queue: Queue, u0: Quantity, u1: Quantity, resource: Resource
) -> tuple[Quantity, Quantity]:
    """How usage going from ``u0`` to ``u1`` moves the queue's (borrowed, lendable)."""
    g = queue.guarantee.get(resource)
    if u0 >= g and u1 >= g:  # all above the guarantee (the common case when g = 0)
        return u1 - u0, ZERO
    borrowed = max(ZERO, u1 - g) - max(ZERO, u0 - g)
    lent = max(ZERO, g - u1) - max(ZERO, g - u0) if queue.lend else ZERO
    return borrowed, lent


def _resources(amounts: Mapping[Resource, Quantity]) -> Resources:
    return Resources(*(amounts.get(r, ZERO) for r in RESOURCES))
