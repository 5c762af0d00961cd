"""The one seam between the cycle and the code that makes it fast.

Steps 3b and 4 ask a ``VerdictCache`` (``equivalence.py``) for each job's best
node, its ranked nodes (gangs) and, when none can take it, its reasons; step 5
asks a ``VictimFinder`` (``preemption.py``) for each blocked job's victims. An
``Accelerator`` makes both for one cycle. The reference implementation,
``Reference``, is the generic path: every filter and scorer of the profile on
every node, shared by equal requests, and ``choose_victims`` on every node for
every blocked job (``preemption.Definition``). The registry names the default
accelerator in one line (``registry.ACCELERATOR``: the capacity index of
``scheduler/accel/``); ``run_cycle(..., index=False)`` takes ``Reference``.

Contract: for any profile and snapshot an accelerator's cache gives the
Plan ``Reference``'s gives (property-tested in ``tests/unit/scheduler/accel/``).
Policies never import an accelerator; an accelerator reads the policies'
public functions and runs any policy it does not know through its own
``filter`` / ``score``.
"""

from __future__ import annotations

from typing import Protocol

from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.equivalence import EquivalenceCache, VerdictCache
from gpudock.scheduler.framework import Profile
from gpudock.scheduler.preemption import Definition, VictimFinder
from gpudock.scheduler.running import RunningIndex
from gpudock.scheduler.session import SchedulerSession


class Accelerator(Protocol):
    """Makes the verdict cache (steps 3b and 4) and the victim finder (step 5) of one cycle."""

    name: str

    def verdicts(
        self, state: CycleState, profile: Profile, session: SchedulerSession
    ) -> VerdictCache:
        """The cycle's verdict cache over ``state`` (the cycle's capacity), for ``profile``;
        ``session``: what it may reuse from the caller's previous cycles."""
        ...

    def victims(
        self, state: CycleState, running: RunningIndex, session: SchedulerSession
    ) -> VictimFinder:
        """Step 5's victim finder over ``state`` (unchanged while it is used) and the
        snapshot's running jobs (``running``); ``session`` as for ``verdicts``."""
        ...


class Reference:
    """The generic path (``equivalence.py``, ``preemption.Definition``): the definition
    every accelerator must match."""

    name = "reference"

    def verdicts(
        self, state: CycleState, profile: Profile, session: SchedulerSession
    ) -> VerdictCache:
        return EquivalenceCache(state, profile)

    def victims(
        self, state: CycleState, running: RunningIndex, session: SchedulerSession
    ) -> VictimFinder:
        return Definition(state, running)
