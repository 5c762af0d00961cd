"""What a GPU's free capacity is worth to the shares of a workload: cutting-stock LP prices.

Packing GPU shares onto GPUs is bin packing. For a workload that asks for
``n_t`` shares of size ``s_t`` (thousandths of a GPU), the cutting-stock
linear program (Gilmore and Gomory, 1961) finds the fewest GPUs that hold
them all::

    minimise  sum_p x_p   subject to  sum_p a_pt x_p >= n_t  for every size t,  x >= 0

over the *patterns* ``p``: multisets of sizes that fit on one GPU (``a_pt``
copies of ``t``, ``sum_t a_pt s_t <= 1000``). Its dual gives each size a
*price* ``y_t >= 0``, the GPUs one more share of that size costs, with no
pattern worth more than one GPU (``sum_t a_pt y_t <= 1``). A share of
0.81 GPU that only rare small shares can join is priced at a whole GPU; the
small shares that fill the 0.19 behind it are priced at 0 while there are
more such gaps than small shares; two 0.47 shares fill a GPU, so each is
priced at half.

``value(f)`` is the most a GPU with ``f`` thousandths free is worth at those
prices: the largest total price of shares that fit in ``f`` (a knapsack). A
placement of a share of size ``s`` on a GPU with ``f`` free then *loses*
``value(f) - y_s - value(f - s)``: nothing when what is left is still worth
what it was, minus the share's price (putting a 0.47 beside another 0.47);
a lot when the share spoils a gap better kept for another size (a 0.32
behind a 0.47 leaves 0.21 that nothing priced fits). ``SharePricing``
(``pricing.py``) ranks placements by this loss, and so does
``PricedFragmentation`` (``fragmentation.py``).

Prices depend only on the sizes' proportions, not on the counts' scale, so
popularity weights serve as the demand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MILLI = 1000
"""Sizes and free capacity are in thousandths of a GPU."""
GRID = 10
"""Share sizes are priced in steps of this many thousandths (``priced_size``): at most 99
sizes, so the LP has at most 99 rows, however many distinct sizes the workload has (its
cost grows with the rows); the Alibaba trace's sizes all lie on it."""
MAX_ROUNDS = 200
"""Column-generation rounds at most (a few tens suffice for tens of sizes)."""
ENUMERATE = 2000
"""Up to this many maximal patterns, the LP takes them all and is solved once (``prices``)."""
SEARCH = 20
"""The enumeration of maximal patterns stops after ``SEARCH`` x ``ENUMERATE`` partial ones."""
EPSILON = 1e-9


def priced_size(size: int) -> int:
    """The size (thousandths) a share of ``size`` is priced as: rounded up to ``GRID``, within
    ``GRID`` and ``MILLI - GRID``. Rounding up never prices a pattern that does not fit (but
    for shares above ``MILLI - GRID``, priced as that)."""
    return min(MILLI - GRID, max(GRID, -(-size // GRID) * GRID))


def warm() -> None:
    """Import the LP solver ``prices`` uses (SciPy: most of a second the first time), so
    that a long-lived caller (the server's controller, at start, on a thread of its own)
    does not pay it inside its first cycle with a share to price."""
    import scipy.optimize  # noqa: F401


def prices(demand: Mapping[int, float]) -> dict[int, float]:
    """The cutting-stock LP's dual price of each share size in ``demand``.

    ``demand``: size in thousandths (1-999) -> how many shares of it (any
    positive weights). When the sizes have at most ``ENUMERATE`` maximal
    patterns (a few sizes, none tiny), the LP over all of them is solved
    once (the case the scheduler meets per cycle). Otherwise
    by column generation: the LP over the patterns found so far (starting
    with each size alone, as many copies as fit), then, from one knapsack
    over the current prices, for each size the best pattern holding it,
    added where it is worth more than one GPU; until none is (or
    ``MAX_ROUNDS``). Both end at the same LP optimum. Raises ``ValueError``
    for a size outside 1-999 or a weight that is not positive.
    """
    import numpy as np
    from scipy.optimize import linprog  # imported when prices are built, not with the scheduler

    sizes = sorted(demand)
    for size in sizes:
        if not 0 < size < MILLI:
            raise ValueError(f"a share size must be 1-{MILLI - 1} thousandths, got {size}")
        if not demand[size] > 0:
            raise ValueError(f"share size {size}: demand must be positive, got {demand[size]}")
    if not sizes:
        return {}
    need = -np.array([float(demand[s]) for s in sizes])

    def solve(patterns: Any) -> list[float]:
        result = linprog(
            np.ones(patterns.shape[1]),
            A_ub=-patterns,
            b_ub=need,
            bounds=(0, None),
            method="highs",
        )
        if result.status != 0:
            raise RuntimeError(f"cutting-stock LP failed: {result.message}")
        return [max(0.0, -float(m)) for m in result.ineqlin.marginals]

    every = maximal_patterns(sizes, ENUMERATE)
    if every is not None:
        return dict(zip(sizes, solve(np.array(every, dtype=np.float64).T), strict=True))
    columns = [np.diag([MILLI // s for s in sizes]).astype(np.float64)]  # each size alone
    seen: set[tuple[int, ...]] = set()
    duals = [0.0] * len(sizes)
    for _ in range(MAX_ROUNDS):
        duals = solve(np.hstack(columns))
        fresh = [p for p in _improving(duals, sizes) if tuple(p) not in seen]
        if not fresh:
            break
        seen.update(tuple(p) for p in fresh)
        columns.append(np.array(fresh, dtype=np.float64).T)
    return dict(zip(sizes, duals, strict=True))


def maximal_patterns(sizes: Sequence[int], limit: int) -> list[tuple[int, ...]] | None:
    """Every maximal pattern of ``sizes`` (ascending): copies of each that fit in ``MILLI``
    together, with no room left for one more of any; None when there are more than
    ``limit`` (or the search passes ``SEARCH`` x ``limit`` partial patterns). Patterns
    that are not maximal add nothing to the LP (prices are not
    negative), so these suffice."""
    found: list[tuple[int, ...]] = []
    counts = [0] * len(sizes)
    smallest = sizes[0]
    steps = [0]  # partial patterns tried: the search gives up past ``SEARCH`` x ``limit``

    def fill(i: int, left: int) -> bool:
        steps[0] += 1
        if steps[0] > SEARCH * limit:
            return False
        if i == len(sizes):
            if left < smallest:
                found.append(tuple(counts))
            return len(found) <= limit
        for copies in range(left // sizes[i], -1, -1):
            counts[i] = copies
            if not fill(i + 1, left - copies * sizes[i]):
                return False
        counts[i] = 0
        return True

    return found if fill(0, MILLI) else None


def values(price: Mapping[int, float]) -> tuple[float, ...]:
    """``value(f)`` for ``f`` = 0..1000: the most shares that fit in ``f`` are worth.

    An unbounded knapsack over the priced sizes; ``value(1000)`` is at least
    1, what an idle GPU is worth to a whole-GPU job. Without shares, every
    partly used GPU is worth 0.
    """
    sizes = sorted(price)
    table = [float(v) for v in _solve([price[s] for s in sizes], sizes)[0]]
    table[MILLI] = max(table[MILLI], 1.0)
    return tuple(table)


def _improving(duals: Sequence[float], sizes: Sequence[int]) -> list[list[int]]:
    """For each size, the pattern of greatest total dual price that holds it, where that
    price is more than one GPU (the pricing knapsack, solved once for every size)."""
    best, last = _solve(duals, sizes)
    out = []
    for i, size in enumerate(sizes):
        if duals[i] + best[MILLI - size] > 1 + EPSILON:
            pattern = [0] * len(sizes)
            pattern[i] = 1
            c = MILLI - size
            while c > 0:
                if last[c] < 0:
                    c -= 1
                else:
                    pattern[last[c]] += 1
                    c -= sizes[last[c]]
            out.append(pattern)
    return out


def _solve(worth: Sequence[float], sizes: Sequence[int]) -> tuple[list[float], list[int]]:
    """The unbounded knapsack's table ``best[0..1000]`` and, per capacity, the item last
    added (-1: none, ``best[c] = best[c - 1]``). ``sizes`` ascending."""
    items = list(zip(sizes, worth, strict=True))
    best = [0.0] * (MILLI + 1)
    last = [-1] * (MILLI + 1)
    for c in range(1, MILLI + 1):
        top, chosen = -1.0, -1
        for i, (size, value) in enumerate(items):
            if size > c:
                break
            candidate = best[c - size] + value
            if candidate > top:
                top, chosen = candidate, i
        if chosen >= 0 and top > best[c - 1] + EPSILON:
            best[c], last[c] = top, chosen
        else:
            best[c] = best[c - 1]
    return best, last
