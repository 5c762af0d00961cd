"""``schedule`` keeps no state of its own: what cycles reuse lives in a caller's session.

Without a session, ``schedule(snapshot, config)`` is a pure function: the
same snapshot gets the same Plan however many calls, and whatever ran in
between. With a ``SchedulerSession``, a cycle reuses what the session's
previous cycle worked out; two sessions never see each other's state, and
their Plans are those of session-less calls.
"""

from __future__ import annotations

import json
from pathlib import Path

from gpudock.config import SchedulerConfig
from gpudock.scheduler.cycle import schedule
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import Plan, Snapshot

from .parity_cases import configs, digest, plan_data, random_snapshot, sequence

GOLDEN = Path(__file__).with_name("plan_parity.json")


def fresh_plans(snapshots: list[Snapshot], config: SchedulerConfig) -> list[Plan]:
    return [schedule(s, config) for s in snapshots]


def test_a_call_without_a_session_gives_the_same_plan_every_time() -> None:
    config = SchedulerConfig()
    snapshot, other = random_snapshot(1), random_snapshot(2)
    first = schedule(snapshot, config)
    schedule(other, config)  # a call in between on another cluster changes nothing
    assert schedule(snapshot, config) == first
    assert first.placements and first.pending


def test_two_interleaved_sessions_get_the_plans_of_fresh_calls() -> None:
    config = SchedulerConfig()
    left, right = list(sequence(210, 6)), list(sequence(211, 6))
    expected_left, expected_right = fresh_plans(left, config), fresh_plans(right, config)
    one, two = SchedulerSession(), SchedulerSession()
    got_left, got_right = [], []
    for a, b in zip(left, right, strict=True):
        got_left.append(schedule(a, config, session=one))
        got_right.append(schedule(b, config, session=two))
        schedule(b, config)  # a session-less call in between touches neither session
    assert got_left == expected_left
    assert got_right == expected_right
    assert one.fits.fits and two.fits.fits
    assert one.accelerator is not two.accelerator


def test_a_session_keeps_what_its_last_cycle_worked_out() -> None:
    config = SchedulerConfig()
    snapshot = random_snapshot(3)
    session = SchedulerSession()
    plan = schedule(snapshot, config, session=session)
    assert session.fits.fits, "the capacity summaries of the snapshot's GPU tuples"
    assert session.running.latest is not None
    assert session.running.latest.running is snapshot.running
    assert schedule(snapshot, config, session=session) == plan


def test_sessions_replay_the_recorded_sequences() -> None:
    """The parity sequences (cycles that keep node views), each with one session
    throughout, get the very Plans recorded from session-less calls."""
    golden = json.loads(GOLDEN.read_text())["digests"]
    every = configs()
    for seed in range(6):
        for name in ("default", "queues"):
            session = SchedulerSession()
            snapshots = list(sequence(200 + seed, 6))
            data = [plan_data(schedule(s, every[name], session=session)) for s in snapshots]
            assert digest(data) == golden[f"sequence-{seed}-{name}"], (seed, name)
