"""The mypyc-compiled modules (``gpudock._native``): the same decisions as their source,
and never stale; a default build is pure Python.

The compiled checks need a current compiled build (``GPUDOCK_COMPILE=1 pip install .``
with a C compiler and the Python headers, as ``scripts/test.sh``'s compiled step
builds, and no source edited since). Run on a pure build, they skip, saying why;
under ``CI=true`` they run only in that compiled step (``GPUDOCK_EXPECT_COMPILED=1``,
where a missing compiled build fails them).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from gpudock import _native

PACKAGE = Path(_native.__file__).resolve().parent
SRC = PACKAGE.parent
REPO = Path(__file__).resolve().parents[2]
BACKEND = REPO / "_build_backend" / "gpudock_backend.py"

_REPLAY = """
import json, random
from gpudock import _native
from gpudock.sim.cluster import parse_cluster
from gpudock.sim.engine import SimConfig, Simulator
from gpudock.sim.policies import POLICIES
from gpudock.sim.traces import TraceJob

rng = random.Random(11)
jobs, now = [], 0.0
for i in range(300):  # short and long jobs, gangs of 16 GPUs, shared GPUs, 3 queues
    now += rng.expovariate(1 / 100)
    duration = rng.uniform(3000, 20000) if rng.random() < 0.3 else rng.uniform(5, 600)
    gpus = rng.choice([1, 1, 2, 4, 8, 16])
    fraction = rng.choice([0.25, 0.5, 0.75]) if gpus == 1 and rng.random() < 0.4 else None
    jobs.append(TraceJob(f"j{i}", round(now, 1), round(duration, 1), gpus,
                         queue=f"q{i % 3}", gpu_fraction=fraction))
runs = {}
for name in ("default", "srtf-oracle", "fifo", "fair-share", "static"):
    sim = Simulator(jobs, parse_cluster("3x8"), POLICIES[name], SimConfig(cycle_interval=60.0))
    record = sim.run()
    runs[name] = {
        "jobs": [[j.job_id, j.start, j.end, j.preemptions] for j in record.jobs],
        "gpus": sorted([k, list(v)] for k, v in sim.first_placements().items()),
        "cycles": record.cycles,
    }
print(json.dumps({"compiled": _native.compiled(), "status": _native.status(), "runs": runs}))
"""


def _run(code: str, *args: str, pure: bool, path: Path = SRC) -> str:
    """Stdout of ``python -c code args`` importing gpudock from ``path``."""
    env = {**os.environ, "PYTHONPATH": str(path)}
    env.pop(_native.PURE_ENV, None)
    if pure:
        env[_native.PURE_ENV] = "1"
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _python(code: str, *, pure: bool, path: Path = SRC) -> dict[str, object]:
    return dict(json.loads(_run(code, pure=pure, path=path)))


EXPECT_COMPILED = "GPUDOCK_EXPECT_COMPILED"
"""Set to 1 where a compiled build must be found (``scripts/test.sh``'s compiled step)."""


def _require_compiled() -> None:
    """Go on only with a current compiled build (this process's ``guard`` found one):
    where one is expected (``GPUDOCK_EXPECT_COMPILED=1``) a missing one fails."""
    if _native.status() == "compiled":
        return
    message = f"no current compiled build to check: {_native.status()}"
    if os.environ.get(EXPECT_COMPILED) == "1":
        pytest.fail(message + f" ({EXPECT_COMPILED}=1: GPUDOCK_COMPILE=1 should have built one)")
    pytest.skip(message + " (GPUDOCK_COMPILE=1 builds one)")


def test_the_compiled_modules_replay_exactly_as_their_source() -> None:
    """Five policies over one job stream, compiled and interpreted: the same starts,
    ends, preemptions and GPUs for every job."""
    _require_compiled()
    compiled = _python(_REPLAY, pure=False)
    source = _python(_REPLAY, pure=True)
    assert compiled["compiled"] is True, compiled["status"]
    assert source["compiled"] is False
    assert source["status"] == f"{_native.PURE_ENV} is set"
    runs = compiled["runs"]
    assert isinstance(runs, dict)
    assert all(any(job[3] for job in runs[name]["jobs"]) for name in ("default", "srtf-oracle"))
    assert runs == source["runs"]


_WHICH = """
import json
from gpudock import _native
import gpudock.scheduler.cycle, gpudock.sim.estimate
print(json.dumps({"compiled": _native.compiled(), "status": _native.status(),
                  "files": [gpudock.scheduler.cycle.__file__, gpudock.sim.estimate.__file__]}))
"""


def _copy_build(to: Path) -> Path:
    """The package with its compiled modules, as built, under ``to``."""
    shutil.copytree(PACKAGE, to / "gpudock", ignore=shutil.ignore_patterns("__pycache__"))
    for lib in SRC.glob("gpudock_native__mypyc*"):
        shutil.copy2(lib, to / lib.name)
    return to


def test_an_edited_source_is_never_shadowed_by_its_stale_compiled_module(
    tmp_path: Path,
) -> None:
    """Python prefers an extension to the ``.py`` beside it. Once any compiled module's
    source differs from what was compiled, all of them load from source (compiled
    modules call each other directly, so a mix would still run stale code)."""
    _require_compiled()
    root = _copy_build(tmp_path)
    fresh = _python(_WHICH, pure=False, path=root)
    assert fresh["compiled"] is True, fresh["status"]
    assert all(str(f).endswith(".so") for f in fresh["files"])  # type: ignore[attr-defined]

    edited = root / "gpudock" / "scheduler" / "accel" / "boards.py"
    edited.write_text(edited.read_text() + "\n# edited after the build\n")
    stale = _python(_WHICH, pure=False, path=root)
    assert stale["compiled"] is False
    assert "a source changed since the build" in str(stale["status"])
    assert [Path(str(f)).suffix for f in stale["files"]] == [".py", ".py"]  # type: ignore[attr-defined]


def test_a_build_missing_one_compiled_module_loads_all_from_source(tmp_path: Path) -> None:
    """A partial build would also mix compiled and interpreted code: none is loaded."""
    _require_compiled()
    root = _copy_build(tmp_path)
    removed = list((root / "gpudock" / "scheduler" / "accel").glob("boards.*.so"))
    assert removed, "no compiled accel/boards module to remove"
    for lib in removed:
        lib.unlink()
    partial = _python(_WHICH, pure=False, path=root)
    assert partial["compiled"] is False
    assert "compiled modules are missing" in str(partial["status"])
    assert [Path(str(f)).suffix for f in partial["files"]] == [".py", ".py"]  # type: ignore[attr-defined]


def test_the_manifest_names_every_compiled_module() -> None:
    """``setup.py`` writes what each module was compiled from; nothing compiled is
    missing from it, so ``guard`` checks every compiled source."""
    _require_compiled()
    written = json.loads((PACKAGE / _native.MANIFEST).read_text())
    assert sorted(written) == sorted(_native.MODULES)
    built = {
        ".".join(p.relative_to(SRC).with_suffix("").with_suffix("").parts)
        for p in PACKAGE.rglob("*.so")
    }
    assert built == set(_native.MODULES)


@pytest.mark.parametrize("pure", [False, True])
def test_gpudock_version_says_how_the_scheduler_runs(pure: bool) -> None:
    _require_compiled()
    printed = _run("from gpudock.cli.main import main; main()", "version", pure=pure)
    expected = (
        f"scheduler: interpreted ({_native.PURE_ENV} is set)"
        if pure
        else f"scheduler: compiled (mypyc, {len(_native.MODULES)} modules)"
    )
    assert printed.splitlines()[1] == expected


_FROZEN = """
import dataclasses, inspect, json
from gpudock import _native
from gpudock.core.affinity import Taint, Toleration, Topology
from gpudock.scheduler.capacity import GpuState
from gpudock.scheduler.snapshot import (
    GpuView, JobRequest, MigView, NodeView, Placement, RunningJob,
)

gpu = GpuView("g0", 0, "H100", 80)
mig = MigView("MIG-0", "g0", "1g.10gb", 10)
samples = {  # every field given, each unlike the others of its type
    NodeView: dict(name="n1", gpus=(gpu,), available=False, unavailable_reason="drained",
                   labels=(("a", "b"),), taints=(), cpus=32.0, used_cpus=4.0,
                   host_memory=64, used_host_memory=8, migs=(mig,), gpu_sharing="mps",
                   cuda_version="12.4", driver_version="550.54", out_of_service=((1, "cordoned"),)),
    JobRequest: dict(id=7, gpus=2, submitted_at=1.5, gpu_memory=5, gpu_model="H100",
                     priority=3, queue="q", user="u", nodes=4, cpus=2.5, max_runtime=99.0,
                     can_preempt=False, node_selector=(("k", "v"),), tolerations=(),
                     topology=None, memory=3, held_by="h", max_gpus=4, remaining=120.0,
                     mig="1g.10gb", gpu_compute=30,
                     cuda_require="NVIDIA_REQUIRE_CUDA=cuda>=12.4"),
    RunningJob: dict(id=7, queue="q", priority=3, node="n1", gpu_uuids=("g0",),
                     memory_per_gpu=5, started_at=1.5, submitted_at=0.5, max_runtime=99.0,
                     min_runtime=9.0, preemptible=False, stopping=True, preempted_for=11,
                     user="u", cpus=2.5, elastic=(1, 4), memory=6, restart_cost=60.0,
                     checkpoint_interval=600.0, start_seconds=12.0, estimated_end=500.0,
                     mig="MIG-1"),
    Placement: dict(job_id=7, node="n1", gpu_uuids=("g0", "g1"), memory_per_gpu=5, mig="MIG-2"),
    GpuState: dict(uuid="g0", index=3, name="H100", memory_total=80, used_memory=40,
                   exclusive=True, shared_jobs=2, healthy=False, numa=1, nvlink=0),
}
out = {}
for cls, values in samples.items():
    fields = dataclasses.fields(cls)
    params = inspect.signature(cls).parameters.values()
    by_keyword = cls(**dict(reversed(list(values.items()))))
    by_position = cls(*values.values())
    minimal = cls(**{f.name: values[f.name] for f in fields
                     if f.default is dataclasses.MISSING})
    try:
        setattr(by_keyword, fields[0].name, values[fields[0].name])
        frozen = False
    except dataclasses.FrozenInstanceError:
        frozen = True
    out[cls.__name__] = {
        "params": [[p.name, repr(p.default)] for p in params],
        "fields": [[f.name, repr(inspect.Parameter.empty if f.default is dataclasses.MISSING
                                 else f.default)] for f in fields],
        "read_back": all(getattr(by_keyword, f.name) == values[f.name] for f in fields),
        "positional_equal": by_position == by_keyword
                            and (cls.__hash__ is None or hash(by_position) == hash(by_keyword)),
        "defaults": all(getattr(minimal, f.name) == f.default for f in fields
                        if f.default is not dataclasses.MISSING),
        "replace": dataclasses.replace(by_keyword, **{fields[0].name: values[fields[0].name]})
                   == by_keyword,
        "frozen": frozen == cls.__dataclass_params__.frozen,  # GpuState is mutable
    }
print(json.dumps({"compiled": _native.compiled(), "classes": out}))
"""


@pytest.mark.parametrize("pure", [False, True])
def test_the_hot_snapshot_types_construct_as_their_dataclass_would(pure: bool) -> None:
    """``NodeView``, ``JobRequest``, ``RunningJob``, ``Placement`` (plain frozen
    dataclasses) and ``GpuState`` (which writes ``__init__`` out): compiled and
    interpreted, the constructor takes exactly the fields with their defaults, stores each
    where it belongs, and the frozen ones stay frozen."""
    if not pure:
        _require_compiled()
    found = _python(_FROZEN, pure=pure)
    assert found["compiled"] is (not pure)
    classes = found["classes"]
    assert isinstance(classes, dict)
    assert sorted(classes) == ["GpuState", "JobRequest", "NodeView", "Placement", "RunningJob"]
    for name, checks in classes.items():
        assert checks["params"] == checks["fields"], name
        failed = [k for k, v in checks.items() if v is False]
        assert not failed, (name, failed)


def test_a_default_build_is_pure_python() -> None:
    """Without ``GPUDOCK_COMPILE=1`` nothing is compiled and the modules run from source."""
    if _native.status() == "compiled":
        pytest.skip("this is a compiled build (GPUDOCK_COMPILE=1)")
    found = _python(_WHICH, pure=False)
    assert found["compiled"] is False
    assert found["status"] == "not compiled (pure Python build)"
    assert not (PACKAGE / _native.MANIFEST).exists()
    assert [Path(str(f)).suffix for f in found["files"]] == [".py", ".py"]  # type: ignore[attr-defined]


def test_compiled_modules_without_a_manifest_are_never_loaded(tmp_path: Path) -> None:
    """A pure build over an old compiled one leaves extensions and no manifest: they are
    stale, so every module loads from source (here the "extension" is not even one)."""
    root = tmp_path
    shutil.copytree(PACKAGE, root / "gpudock", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    (root / "gpudock" / _native.MANIFEST).unlink(missing_ok=True)
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in ("cycle", "accel/boards"):
        (root / "gpudock" / "scheduler" / f"{name}{suffix}").write_bytes(b"not an ELF file")
    found = _python(_WHICH, pure=False, path=root)
    assert found["compiled"] is False
    assert "compiled modules without a manifest" in str(found["status"])
    assert [Path(str(f)).suffix for f in found["files"]] == [".py", ".py"]  # type: ignore[attr-defined]


def _backend() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpudock_backend", BACKEND)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_only_a_compiled_build_asks_for_mypy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The build backend asks for nothing beyond setuptools by default; with
    ``GPUDOCK_COMPILE=1``, for mypy and the typed libraries at the project's own pins."""
    if not BACKEND.is_file():
        pytest.skip(f"no checkout here: {BACKEND}")
    backend = _backend()
    monkeypatch.delenv("GPUDOCK_COMPILE", raising=False)
    assert backend.get_requires_for_build_wheel() == []
    assert backend.get_requires_for_build_editable() == []
    monkeypatch.setenv("GPUDOCK_COMPILE", "1")
    wanted = backend.get_requires_for_build_wheel()
    assert wanted == backend.get_requires_for_build_editable()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pinned = set(project["dependencies"]) | set(project["optional-dependencies"]["dev"])
    assert {w.split("==")[0] for w in wanted} >= {"mypy", "pydantic", "numpy"}
    assert set(wanted) <= pinned
