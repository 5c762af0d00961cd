"""``SchedulerSession``: what one caller's cycles keep from one cycle to the next.

``schedule(snapshot, config)`` is a pure function: every call starts from
nothing. A caller that runs cycle after cycle on snapshots that share
unchanged objects (the controller's ``SnapshotCache``, the simulator, the
benchmarks) passes one session to every call instead, and each cycle then
starts from what the previous one worked out for those very objects::

    session = SchedulerSession()
    while True:
        plan = schedule(next_snapshot(), config, session=session)

The session holds summaries and indexes of immutable snapshot objects,
looked up by identity (each entry keeps its object, so an id is never
mistaken), and each part is brought up to date or rebuilt when those
objects change; what the registry's accelerator keeps, in a slot of its
own (``accelerator``: the session names no accelerator's class); and what
pre-score plugins keep (``plugins``, a ``framework.PluginState``). No answer
depends on it: a cycle with a session returns the Plan a fresh call returns
(``tests/unit/scheduler/test_session.py``), unless the caller asks plugins to
learn from earlier cycles (``SchedulerSession(learn=True)``, as the controller
and the simulator do: share prices then follow the job mix as tracked over the
cycles, and ``fgd_adaptive`` learns the workload over them).

A session belongs to one caller and one cycle at a time; it holds no lock.
Two callers (two simulator runs, a benchmark beside a server) each own one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudock.scheduler.capacity import FitMemo
from gpudock.scheduler.framework import PluginState
from gpudock.scheduler.running import RunningMemo


@dataclass(slots=True)
class SchedulerSession:
    """One memo per part of the cycle that can reuse its last answer.

    * ``fits``: ``CycleState``'s capacity summaries of snapshot GPU tuples,
      and whether the GPU uuids were unique;
    * ``running``: the latest ``RunningIndex`` of ``snapshot.running``;
    * ``accelerator``: what the accelerator keeps (one value per kind, of its own
      classes; ``acceleration.py``), never read by anything else;
    * ``plugins``: what pre-score plugins keep (``framework.PluginState``);
      ``learn`` lets them carry what they saw into later Plans.
    """

    fits: FitMemo = field(default_factory=FitMemo)
    running: RunningMemo = field(default_factory=RunningMemo)
    learn: bool = False
    accelerator: PluginState = field(init=False)
    plugins: PluginState = field(init=False)

    def __post_init__(self) -> None:
        self.accelerator = PluginState()
        self.plugins = PluginState(self.learn)
