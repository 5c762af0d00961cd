"""The capacity index's ``PostFilter`` answers as the definition does, cycle after cycle.

``DeclaredPostFilter`` keeps its ``admits_empty`` answers in the session for the next
cycle, which takes them for nodes whose view is the very same object. Over sequences of
snapshots that keep some views and change, add or drop others (``test_reuse.sequences``),
with one session, every answer for every job of the sequence must be ``FiltersAfter``'s
(the profile's filters on copies of the node).
"""

from __future__ import annotations

from hypothesis import given, settings

from gpudock.config import SchedulerConfig
from gpudock.scheduler.accel.indexed import CapacityIndex
from gpudock.scheduler.capacity import CycleState
from gpudock.scheduler.framework import placement_key
from gpudock.scheduler.post_filter import FiltersAfter
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import Snapshot

from ..test_reuse import sequences
from .test_indexed import configs


@settings(max_examples=80, deadline=None)
@given(sequences(), configs)
def test_kept_answers_are_the_definitions_on_every_cycle(
    sequence: list[Snapshot], config: SchedulerConfig
) -> None:
    profile = build_profile(config)
    session = SchedulerSession()
    by_key = {placement_key(job): job for snapshot in sequence for job in snapshot.pending}
    for snapshot in [s for drawn in sequence for s in (drawn, drawn)]:
        state = CycleState(snapshot.nodes)
        declared = CapacityIndex().post_filter(state, profile, session)
        reference = FiltersAfter(state, profile)
        for job in by_key.values():
            for name in state.views:
                assert declared.admits_empty(job, name) == reference.admits_empty(job, name)
                assert declared.fits_after(job, name, ()) == reference.fits_after(job, name, ())
