"""When two policies tie, ``simulate`` says so and recommends neither.

The compared figure is the average JCT (``avg_jct_s``, as the summaries
report it, rounded to 0.1 s). Two deployable policies tie when their
figures differ by no more than ``noise``: the run-to-run spread of that
figure that the caller measured (the largest minus the smallest average JCT
of one policy across its seeds or repeats). A single run per policy measures
no spread, so ``noise`` is 0 and only equal figures tie. Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Summary = Mapping[str, object]


def tied_with(best: Summary, others: Sequence[Summary], noise: float = 0.0) -> list[Summary]:
    """The summaries of ``others`` whose average JCT is within ``noise`` of ``best``'s.

    ``others`` should hold only deployable policies other than ``best``; one
    without an average JCT (it finished nothing) never ties. ``noise`` < 0 is
    a ``ValueError``.
    """
    if noise < 0:
        raise ValueError(f"noise must be at least 0, got {noise}")
    figure = _avg(best)
    if figure is None:
        return []
    return [s for s in others if (a := _avg(s)) is not None and abs(a - figure) <= noise]


def tie_sentence(best: Summary, tied: Sequence[Summary], noise: float) -> str:
    """``"Tie: default and fifo have the same average JCT (1,500 s), so none is
    recommended."``; with a measured spread, ``"... within the run-to-run spread
    of 12.0 s ..."``."""
    names = [str(best.get("policy")), *(str(s.get("policy")) for s in tied)]
    listed = " and ".join([", ".join(names[:-1]), names[-1]])
    figure = _avg(best) or 0.0
    if noise > 0:
        same = (
            f"average JCTs within the run-to-run spread it measured ({noise:,.1f} s; "
            f"{figure:,.1f} s for {names[0]})"
        )
    else:
        same = f"the same average JCT ({figure:,.1f} s)"
    return f"Tie: {listed} have {same}, so none is recommended."


def _avg(summary: Summary) -> float | None:
    value = summary.get("avg_jct_s")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
