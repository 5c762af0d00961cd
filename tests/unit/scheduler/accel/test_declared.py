"""The accelerator reads declarations, never classes: any profile gets the generic Plan.

The capacity index answers whatever the profile's policies declare (``declarations.py``)
and runs the rest through their own methods on its candidates. These properties draw
profiles the built-in one is not: filters in another order (node-only filters after
capacity ones: the generic path's wording), several scorers (one order when they agree,
the scorers themselves on the candidates when they do not), a scorer that declares
nothing, and one that scores by a hash of the node's name, with or without an undeclared
filter; on the random clusters of ``test_indexed`` (and their CPU and stranding variants).
Every Plan equals the generic path's. And the accelerator imports no policy module.
"""

from __future__ import annotations

import ast
import zlib
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from gpudock.config import SchedulerConfig
from gpudock.scheduler.accel.declared import FilterPlan
from gpudock.scheduler.capacity import CycleState, NodeState
from gpudock.scheduler.cycle import run_cycle
from gpudock.scheduler.framework import Profile, ScorePolicy, skipped
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.snapshot import JobRequest, Snapshot

from ..builders import make_job
from .test_indexed import cpu_snapshots, snapshots, stranding_snapshots
from .test_unknown_filters import HashFilter

ACCEL = Path(__file__).resolve().parents[4] / "src" / "gpudock" / "scheduler" / "accel"


class Hashed:
    """A scorer that declares nothing: a node's score is a hash of its name (and ``salt``)."""

    name = "hashed_score"

    def __init__(self, salt: int) -> None:
        self.salt = salt

    def score(self, job: JobRequest, node: NodeState, state: CycleState) -> float:
        return float(zlib.crc32(f"{self.salt}:{node.name}".encode()) % 5)


class Zero:
    """A scorer that declares nothing and scores every node 0 (``--extra-scorer noop``)."""

    name = "zero"

    def score(self, job: JobRequest, node: NodeState, state: CycleState) -> float:
        return 0.0


BASES = [
    build_profile(SchedulerConfig(placement="binpack")),
    build_profile(SchedulerConfig(placement="spread")),
    build_profile(
        SchedulerConfig.model_validate(
            {"policies": {"scorers": [{"name": "binpack", "options": {"price_shares": False}}]}}
        )
    ),
]


@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    """A profile the built-in one is not (module doc)."""
    base = draw(st.sampled_from(BASES))
    filters = list(base.filters)
    if draw(st.booleans()):  # another order: a node-only filter after the capacity ones
        filters.append(filters.pop(draw(st.integers(0, 2))))
    if draw(st.booleans()):
        extra = HashFilter(salt=draw(st.integers(0, 99)), share=draw(st.integers(0, 4)),
                           never=draw(st.booleans()))  # fmt: skip
        filters.insert(draw(st.integers(0, len(filters))), extra)
    scorer, _ = base.scorers[0]
    other, _ = BASES[1 - BASES.index(base) if base is not BASES[2] else 0].scorers[0]
    scorers: list[tuple[ScorePolicy, float]] = draw(
        st.sampled_from(
            [
                [(scorer, 2.0)],  # another weight: the same order
                [(scorer, 1.0), (scorer, 3.0)],  # two that agree
                [(scorer, 1.0), (other, 1.0)],  # two that do not
                [(scorer, 1.0), (Zero(), 1.0)],  # one that declares nothing
                [(Hashed(draw(st.integers(0, 9))), 1.0)],
                [(scorer, 1.0), (Hashed(draw(st.integers(0, 9))), 0.5)],
            ]
        )
    )
    return replace(base, filters=tuple(filters), scorers=tuple(scorers))


def same_plans(snapshot: Snapshot, profile: Profile) -> None:
    assert run_cycle(snapshot, profile) == run_cycle(snapshot, profile, index=False)


@settings(max_examples=300, deadline=None)
@given(snapshots(), profiles())
def test_any_profile_gets_the_generic_plan(snapshot: Snapshot, profile: Profile) -> None:
    same_plans(snapshot, profile)


@settings(max_examples=150, deadline=None)
@given(cpu_snapshots(), profiles())
def test_any_profile_gets_the_generic_plan_for_jobs_asking_for_cpus(
    snapshot: Snapshot, profile: Profile
) -> None:
    same_plans(snapshot, profile)


@settings(max_examples=150, deadline=None)
@given(stranding_snapshots(), profiles())
def test_any_profile_gets_the_generic_plan_where_shares_strand_gpus(
    snapshot: Snapshot, profile: Profile
) -> None:
    same_plans(snapshot, profile)


def test_the_accelerator_imports_no_policy_and_tests_no_class() -> None:
    for path in ACCEL.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert "scheduler.policies" not in node.module, (path.name, node.module)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "type":
                raise AssertionError(f"{path.name}: type(...) at line {node.lineno}")


def test_a_job_needs_the_filters_it_does_not_skip_and_jobs_that_skip_alike_share_them() -> None:
    profile = build_profile(SchedulerConfig())
    plan = FilterPlan(profile)
    one, two = make_job(1).gpus(1).build(), make_job(2).gpus(4).build()
    model, cpus = make_job(3).gpus(1).model("H100").build(), make_job(4).gpus(1).cpus(2).build()
    for job in (one, two, model, cpus):
        found = plan.for_job(job)
        needed = [f for _, f, _ in found.node_only] + [f for _, f, _ in found.gpus]
        needed += [f for _, f, _ in found.host] + [f for _, f in (*found.group, *found.extras)]
        assert sorted(map(id, needed)) == sorted(
            id(f) for f in profile.filters if not skipped(f, job)
        )
    assert plan.for_job(one) is plan.for_job(two)  # other keys, the same filters skipped
    assert plan.for_job(model) is not plan.for_job(one)  # ``gpu_model`` checks it
    assert plan.for_job(cpus) is not plan.for_job(one)  # ``cpu_capacity`` checks it
