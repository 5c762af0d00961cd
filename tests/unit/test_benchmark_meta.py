"""``benchmarks/_meta``: where the real traces are looked for, and what every benchmark's
JSON says about its run (build, commit, CPUs)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from benchmarks import _meta
from tests.kit import traces


def test_the_traces_are_looked_for_beside_the_project_root(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    root.mkdir()
    assert _meta.traces_dir(root, environ={}) == tmp_path / "shared" / "traces"


def test_gpudock_traces_overrides_the_relative_folder(tmp_path: Path) -> None:
    given = tmp_path / "elsewhere"
    found = _meta.traces_dir(tmp_path / "checkout", environ={"GPUDOCK_TRACES": str(given)})
    assert found == given
    assert _meta.traces_dir(tmp_path / "checkout", environ={"GPUDOCK_TRACES": ""}) == (
        tmp_path / "shared" / "traces"
    )


def test_missing_traces_fail_under_ci(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUDOCK_TRACES", str(tmp_path / "absent"))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"real traces not found at .*absent"):
        traces.real("philly/philly.csv")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="real traces not found"):
        traces.real("philly/philly.csv")


def test_present_traces_give_the_file_under_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUDOCK_TRACES", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    assert traces.real("philly/philly.csv") == tmp_path / "philly" / "philly.csv"


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}  # fmt: skip
    done = subprocess.run(["git", "-C", str(root), *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_commit_is_the_short_hash_and_dirty_when_tracked_files_changed(
    tmp_path: Path,
) -> None:
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    _git(tmp_path, "add", "a.txt")
    _git(tmp_path, "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "--short", "HEAD")
    assert _meta.commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("two\n")
    assert _meta.commit(tmp_path) == f"{head}-dirty"


def test_outside_a_checkout_the_commit_is_unknown(tmp_path: Path) -> None:
    assert _meta.commit(tmp_path / "not-a-repo") == "unknown"


def test_build_info_names_the_build_the_commit_and_the_cpus() -> None:
    info = _meta.build_info()
    assert info["build"] in ("pure", "compiled")
    assert info["build"] == ("compiled" if info["build_status"] == "compiled" else "pure")
    assert isinstance(info["commit"], str) and info["commit"]
    count, affinity = info["cpu_count"], info["cpu_affinity"]
    assert isinstance(count, int) and isinstance(affinity, int)
    assert 1 <= affinity <= count


def test_every_benchmark_script_records_its_build_in_its_json() -> None:
    """Each script that prints a benchmark's JSON puts ``build_info()`` in it (helpers'
    names start with ``_``; ``results.py`` renders the page)."""
    scripts = sorted(
        p
        for p in (Path(_meta.REPO) / "benchmarks").glob("*.py")
        if not p.stem.startswith("_") and p.stem != "results"
    )
    assert len(scripts) >= 10, "the benchmark scripts were not found"
    records = re.compile(r"\*\*(_meta\.)?build_info\(")
    missing = [p.name for p in scripts if not records.search(p.read_text(encoding="utf-8"))]
    assert missing == []
