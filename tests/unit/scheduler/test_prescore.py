"""The pre-score extension point, and share pricing as one plugin behind it.

A ``PreScorePolicy`` runs once per cycle, before any job is scored, and writes its
per-cycle data into the ``CycleState``, where scorers and pickers read it. What it keeps
between cycles lives in the caller's session (``PluginState``), never in the plugin: a
session-less call stays pure, and a session that does not learn gives the Plans of fresh
calls. No plugin replaces another.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from gpudock.config import SchedulerConfig
from gpudock.scheduler.capacity import CycleState, NodeState, capacity_left
from gpudock.scheduler.cycle import run_cycle, schedule
from gpudock.scheduler.framework import PluginState, Profile
from gpudock.scheduler.policies.share_price.mix import job_mix
from gpudock.scheduler.policies.share_price.plugin import SharePrice, ShareState
from gpudock.scheduler.policies.share_price.pricing import SharePricing
from gpudock.scheduler.registry import build_profile
from gpudock.scheduler.session import SchedulerSession
from gpudock.scheduler.snapshot import JobRequest, Snapshot

from .builders import make_job, make_node, make_running, make_snapshot

SRC = Path(__file__).resolve().parents[3] / "src" / "gpudock"


def _shares(seed: int) -> Snapshot:
    """Two 1000 MiB GPUs per node, a 0.47 share running, shares of other sizes pending."""
    nodes = [make_node(f"n{i}").gpus(2, memory="1000MiB") for i in range(4)]
    running = [make_running(100 + i).on(f"n{i}", 0).share("470MiB") for i in range(seed % 4)]
    pending = [make_job(i).gpu_memory(f"{320 + 90 * ((i + seed) % 4)}MiB") for i in range(1, 7)]
    return make_snapshot(nodes, pending, running=running)


@dataclass
class Kept:
    """What the counting plugin keeps in a session."""

    cycles: int = 0


@dataclass(frozen=True)
class Emptiest:
    """This cycle's data: put jobs on the emptiest node."""


class Spreads:
    """A pre-score plugin that counts its cycles in the session and writes ``Emptiest``."""

    name = "spreads"

    def pre_score(
        self, snapshot: Snapshot, profile: Profile, state: CycleState, kept: PluginState
    ) -> None:
        kept.get(Kept).cycles += 1
        state.write(Emptiest())

    def prepare(self, profile: Profile) -> None:
        pass

    def relevant(self, job: JobRequest) -> bool:
        return True


class Follows:
    """A scorer that reads the cycle's data: the emptiest node with ``Emptiest``, else the
    fullest."""

    name = "follows"
    reads = (Emptiest,)

    def score(self, job: JobRequest, node: NodeState, state: CycleState) -> float:
        left = capacity_left(job, node)
        return left if state.read(Emptiest) is not None else -left


def test_a_pre_score_plugin_runs_once_per_cycle_and_scorers_read_what_it_wrote() -> None:
    nodes = [make_node("n0").gpus(8).exclusive(0, 1, 2, 3, 4, 5), make_node("n1").gpus(8)]
    snapshot = make_snapshot(nodes, [make_job(1).gpus(1), make_job(2).gpus(1)])
    profile = replace(build_profile(SchedulerConfig()), scorers=((Follows(), 1.0),))
    for index in (True, False):
        packed = run_cycle(snapshot, profile, index=index)
        assert {p.node for p in packed.placements} == {"n0"}  # no data: the fullest node
        session = SchedulerSession()
        with_plugin = replace(profile, pre_scorers=(*profile.pre_scorers, Spreads()))
        spread = run_cycle(snapshot, with_plugin, index=index, session=session)
        assert {p.node for p in spread.placements} == {"n1"}  # the plugin's data: the emptiest
        assert session.plugins.get(Kept).cycles == 1  # once for the cycle, not once per job


def test_the_default_profile_prices_shares_through_the_share_price_plugin() -> None:
    profile = build_profile(SchedulerConfig())
    assert [p.name for p in profile.pre_scorers] == ["share_price", "learn_workload"]
    snapshot = _shares(0)
    state = CycleState(snapshot.nodes)
    SharePrice().pre_score(snapshot, profile, state, PluginState())
    assert state.read(SharePricing) is not None
    whole = make_snapshot([make_node("n0").gpus(2)], [make_job(1).gpus(1)])
    state = CycleState(whole.nodes)
    SharePrice().pre_score(whole, profile, state, PluginState())
    assert state.read(SharePricing) is None  # nothing to price
    unpriced = build_profile(
        SchedulerConfig.model_validate(
            {"policies": {"scorers": [{"name": "binpack", "options": {"price_shares": False}}]}}
        )
    )
    state = CycleState(snapshot.nodes)
    SharePrice().pre_score(snapshot, unpriced, state, PluginState())
    assert state.read(SharePricing) is None  # no scorer reads prices


def test_a_session_that_does_not_learn_gives_the_plans_of_fresh_calls() -> None:
    config = SchedulerConfig()
    session = SchedulerSession()
    for seed in range(6):
        snapshot = _shares(seed)
        assert schedule(snapshot, config, session=session) == schedule(snapshot, config)
    assert session.plugins.get(ShareState).mix.publications == 0  # the tracker never read


def test_a_learning_session_keeps_the_mix_tracker_and_another_session_has_its_own() -> None:
    config = SchedulerConfig()
    one, two = SchedulerSession(learn=True), SchedulerSession(learn=True)
    first = _shares(0)
    schedule(first, config, session=one)
    tracked = one.plugins.get(ShareState).mix
    assert tracked.publications == 1
    assert sorted(tracked.published or ()) == sorted(job_mix(first))
    assert two.plugins.get(ShareState).mix.publications == 0
    kept = {k for k, v in vars(SharePrice).items() if not k.startswith("__") and not callable(v)}
    assert kept == {"name"}  # no state in the plugin class: it is all in the sessions


def test_scipy_is_imported_only_when_the_plugin_runs() -> None:
    code = (
        "import sys, gpudock.scheduler.cycle, gpudock.scheduler.registry;"
        "print('scipy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_the_controller_the_cycle_and_the_simulator_name_no_policy() -> None:
    engine = ("engine", "jobs", "state", "priorities", "transitions")  # sim/engine.py, split
    for module in ("runtime/controller.py", "scheduler/cycle.py", *(f"sim/{m}.py" for m in engine)):
        named = {n for n in _imports(SRC / module) if "scheduler.policies" in n or "pricing" in n}
        assert named == set(), (module, named)


def test_no_default_policy_imports_an_experimental_one() -> None:
    experimental = ("gpudock.scheduler.policies.fgd", "gpudock.scheduler.policies.fgd_adaptive")
    policies = SRC / "scheduler" / "policies"
    for path in [*policies.glob("*.py"), *policies.glob("share_price/*.py")]:
        if path.stem in ("fgd", "fgd_adaptive"):
            continue
        assert not _imports(path) & set(experimental), path
