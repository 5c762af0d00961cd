"""The one seam between the cycle and the code that makes it fast.

Steps 3b and 4 ask a ``VerdictCache`` (``equivalence.py``) for each job's best
node, its ranked nodes (gangs) and, when none can take it, its reasons; steps 3c,
5 and 6 ask a ``PostFilter`` (``post_filter.py``) whether the profile's filters
admit a job on a node as it would be once some jobs left; step 5 asks a
``VictimFinder`` (``preemption.py``) for each blocked job's victims. An
``Accelerator`` makes the three for one cycle. The reference implementation,
``Reference``, is the generic path: every filter and scorer of the profile on
every node, shared by equal requests; the filters on copies of the nodes as they
would be (``post_filter.FiltersAfter``); and ``choose_victims`` on every node for
every blocked job (``preemption.Definition``). The registry names the default
accelerator in one line (``registry.ACCELERATOR``: the capacity index of
``scheduler/accel/``); ``run_cycle(..., index=False)`` takes ``Reference``.

Contract: for any profile and snapshot an accelerator gives the Plan
``Reference`` gives (property-tested in ``tests/unit/scheduler/accel/``).
Policies never import an accelerator, and an accelerator imports no policy: it
reads what policies declare (``declarations.py``) and runs any policy that
declares nothing through its own ``filter`` / ``score`` on its candidates. What
it keeps between a caller's cycles goes in the session's ``accelerator`` slot.
"""

from __future__ import annotations

from typing import Protocol

from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.equivalence import EquivalenceCache, VerdictCache
from gpudock.scheduler.framework import Profile
from gpudock.scheduler.post_filter import FiltersAfter, PostFilter
from gpudock.scheduler.preemption import Definition, VictimFinder
from gpudock.scheduler.running import RunningIndex
from gpudock.scheduler.session import SchedulerSession


class Accelerator(Protocol):
    """Makes the verdict cache (steps 3b and 4), the ``PostFilter`` (steps 3c, 5, 6) and the
    victim finder (step 5) of one cycle."""

    name: str

    def verdicts(
        self, state: CycleState, profile: Profile, session: SchedulerSession
    ) -> VerdictCache:
        """The cycle's verdict cache over ``state`` (the cycle's capacity, with the pre-score
        plugins' data), for ``profile``; ``session``: what it may reuse from the caller's
        previous cycles."""
        ...

    def post_filter(
        self, state: CycleState, profile: Profile, session: SchedulerSession
    ) -> PostFilter:
        """The cycle's ``PostFilter`` over ``state`` as it is when asked; ``session`` as for
        ``verdicts``."""
        ...

    def victims(
        self, state: CycleState, running: RunningIndex, feasibility: PostFilter
    ) -> VictimFinder:
        """Step 5's victim finder over ``state`` (unchanged while it is used), the
        snapshot's running jobs (``running``) and the cycle's ``feasibility``."""
        ...


class Reference:
    """The generic path (``equivalence.py``, ``post_filter.FiltersAfter``,
    ``preemption.Definition``): the definition every accelerator must match."""

    name = "reference"

    def verdicts(
        self, state: CycleState, profile: Profile, session: SchedulerSession
    ) -> VerdictCache:
        return EquivalenceCache(state, profile)

    def post_filter(
        self, state: CycleState, profile: Profile, session: SchedulerSession
    ) -> PostFilter:
        return FiltersAfter(state, profile)

    def victims(
        self, state: CycleState, running: RunningIndex, feasibility: PostFilter
    ) -> VictimFinder:
        return Definition(state, running, feasibility)
