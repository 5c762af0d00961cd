"""What every benchmark records about its run, and where the real traces are.

``build_info()`` goes into each benchmark's JSON: the build that ran (``pure`` or
``compiled``, ``gpudock._native``), the git commit (short hash, ``-dirty`` when
tracked files differ from it) and the CPUs (``os.cpu_count()`` and how many this
process may run on). ``traces_dir()`` is the one lookup of the real traces, for
the benchmarks and the tests (``tests/kit/traces.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRACES_ENV = "GPUDOCK_TRACES"


def traces_dir(root: Path = REPO, environ: Mapping[str, str] | None = None) -> Path:
    """``$GPUDOCK_TRACES`` when set, else ``shared/traces`` beside the project ``root``
    (``../shared/traces``, where CI keeps them). The folder may not exist."""
    given = (os.environ if environ is None else environ).get(TRACES_ENV, "")
    return Path(given) if given else root.parent / "shared" / "traces"


def commit(root: Path = REPO) -> str:
    """The checked-out commit's short hash, ``-dirty`` when tracked files changed
    (other than the recorded results, which a batch of recordings writes as it goes);
    ``unknown`` outside a git checkout."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
        )

    try:
        head = git("rev-parse", "--short", "HEAD")
        if head.returncode != 0:
            return "unknown"
        git("update-index", "-q", "--refresh")
        results = (":!benchmarks/results", ":!benchmarks/RESULTS.md")
        dirty = git("diff-index", "--quiet", "HEAD", "--", ".", *results).returncode != 0
    except OSError:  # no git
        return "unknown"
    return head.stdout.strip() + ("-dirty" if dirty else "")


def cpus() -> dict[str, int | None]:
    """``cpu_count``: the machine's CPUs; ``cpu_affinity``: those this process may use."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu_count": os.cpu_count(), "cpu_affinity": affinity}


def build_info(root: Path = REPO) -> dict[str, object]:
    """``build``, ``build_status`` (why), ``commit``, ``cpu_count``, ``cpu_affinity``:
    for every benchmark's JSON. Imports ``root``'s gpudock unless one is imported."""
    if "gpudock" not in sys.modules:
        sys.path.insert(0, str(root / "src"))
    from gpudock import _native

    return {
        "build": _native.build(),
        "build_status": _native.status(),
        "commit": commit(root),
        **cpus(),
    }
