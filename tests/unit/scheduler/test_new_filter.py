"""A new filter is one module and one registry line, and every step honours it.

The module below is all a new filter is: a class with a ``name``, a ``layer``, its
``filter`` and ``explain``, and, optionally, what it declares (here: its verdict depends
on the node alone, ``declarations.NodeOnly``). The test registers it as its registry
line would, names it in the config, and checks that placement, preemption, the EASY
reservation and the submit-time check all keep jobs off the nodes it rejects, on the
accelerated and the generic path, declared or not.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from gpudock.config import SchedulerConfig
from gpudock.core.job import PendingReason
from gpudock.scheduler import registry
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.declarations import NodeOnly, NodeTraits, TraitRejection
from gpudock.scheduler.feasibility import never_fits
from gpudock.scheduler.framework import SUCCESS, FilterPolicy, Rejection, Status
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import JobRequest, Plan, Snapshot

from .builders import NodeBuilder, assert_placed, make_job, make_node, make_running, make_snapshot

# ── the module: policies/driver.py ────────────────────────────────────────

OLD = ("gpudock.io/driver", "470")


def _check(job: JobRequest, node: NodeTraits) -> Status:
    if OLD not in node.labels:
        return SUCCESS
    return Status.unresolvable("constraints", f"node {node.name} has driver 470, too old")


def _word(job: JobRequest, rejected: Sequence[TraitRejection], total: int) -> PendingReason:
    names = ", ".join(node.name for _, node in rejected)
    return PendingReason("constraints", f"driver too old on {names}", "runs on a newer driver")


class Driver:
    """Rejects nodes whose NVIDIA driver is too old ("never on this node")."""

    name = "driver"
    layer = "constraints"
    field = "gpus"
    declared = NodeOnly(_check, _word)

    def filter(self, job: JobRequest, node: NodeTraits) -> Status:
        return _check(job, node)

    def explain(
        self, job: JobRequest, rejections: Sequence[Rejection], total_nodes: int
    ) -> PendingReason | None:
        return _word(job, [(r.status, r.node) for r in rejections], total_nodes)


class UndeclaredDriver(Driver):
    """The same filter, declaring nothing: the accelerator runs it on its candidates."""

    name = "undeclared_driver"
    declared = None  # type: ignore[assignment]


# ── the tests ─────────────────────────────────────────────────────────────


@pytest.fixture(params=[Driver, UndeclaredDriver], ids=["declared", "undeclared"])
def config(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> SchedulerConfig:
    """The filter registered with its one line, and named in the config."""
    policy: Callable[[], FilterPolicy] = request.param
    name = request.param.name
    monkeypatch.setitem(registry.FILTER_POLICIES, name, policy)
    filters = [*registry.DEFAULT_FILTERS, name]
    return SchedulerConfig.model_validate({"policies": {"filters": filters}})


def nodes() -> list[NodeBuilder]:
    """Node ``old`` has the old driver and comes first by name and by fill."""
    return [make_node("new").gpus(2), make_node("old").gpus(2).label(*OLD)]


def both(snapshot: Snapshot, config: SchedulerConfig) -> Plan:
    profile = build_profile(config)
    plan = run_cycle(snapshot, profile)
    assert plan == run_cycle(snapshot, profile, index=False)
    return plan


def test_placement_avoids_the_node(config: SchedulerConfig) -> None:
    busy = [make_running(9).on("old", 0)]  # binpack prefers old, the fuller node
    plan = both(make_snapshot(nodes(), [make_job(1)], running=busy), config)
    assert_placed(plan, 1, node="new")
    crowded = [make_running(9).on("new", 0, 1)]
    plan = both(make_snapshot(nodes(), [make_job(1)], running=crowded), config)
    assert plan.placements == []
    messages = [r.message for r in plan.pending[1]]
    assert "driver too old on old" in messages


def test_preemption_avoids_the_node(config: SchedulerConfig) -> None:
    running = [
        make_running(10).on("new", 0, 1).priority(2),
        make_running(11).on("old", 0, 1).priority(1),  # cheaper, on the rejected node
    ]
    snapshot = make_snapshot(nodes(), [make_job(1).priority(10)], now=10, running=running)
    assert [p.victim_id for p in both(snapshot, config).preemptions] == [10]


def test_the_reservation_avoids_the_node(config: SchedulerConfig) -> None:
    running = [
        make_running(10).on("new", 0, 1).max_runtime(900),
        make_running(11).on("old", 0, 1).max_runtime(100),  # frees first, on the rejected node
    ]
    snapshot = make_snapshot(nodes(), [make_job(1).gpus(2).cannot_preempt()], running=running)
    assert [(r.node, r.start) for r in both(snapshot, config).reservations] == [("new", 900)]


def test_the_submit_check_refuses_in_its_words(config: SchedulerConfig) -> None:
    profile = build_profile(config)
    old_only = [make_node("old").gpus(2).label(*OLD).build()]
    refusal = never_fits(make_job(1).build(), old_only, profile)
    assert refusal is not None
    assert (refusal.message, refusal.field) == ("driver too old on old", "gpus")
    assert never_fits(make_job(1).build(), [n.build() for n in nodes()], profile) is None
