"""The scheduler's and the simulator's hot modules, compiled with mypyc when built so.

The default build is pure Python. ``GPUDOCK_COMPILE=1`` makes ``setup.py`` compile
the modules in ``MODULES`` to C extensions (mypyc, from the same typed source) and,
once the build succeeds, write ``MANIFEST``: the SHA-256 of each module's source as
compiled. Python imports an extension module ahead of the ``.py`` beside it, so a
source edited after the build would be shadowed by stale compiled code. ``guard``,
called by ``gpudock/__init__``, prevents that: unless every listed source still
matches the manifest, it makes all of ``MODULES`` load from their ``.py`` files
(all of them, since compiled modules call each other directly, not through the
module objects). Extensions without a manifest (a pure build over an old compiled
one) are ignored the same way. ``GPUDOCK_PURE=1`` does the same on purpose.

This module imports only the standard library: ``setup.py`` reads it at build time.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

MODULES: tuple[str, ...] = (
    "gpudock.scheduler.accel.boards",
    "gpudock.scheduler.accel.catalog",
    "gpudock.scheduler.accel.declared",
    "gpudock.scheduler.accel.extra",
    "gpudock.scheduler.accel.index",
    "gpudock.scheduler.accel.indexed",
    "gpudock.scheduler.accel.node_only",
    "gpudock.scheduler.accel.post_filter",
    "gpudock.scheduler.accel.priced_shares",
    "gpudock.scheduler.accel.ranked",
    "gpudock.scheduler.accel.reasons",
    "gpudock.scheduler.accel.verdicts",
    "gpudock.scheduler.accel.victims",
    "gpudock.scheduler.accel.walked",
    "gpudock.scheduler.accel.walks",
    "gpudock.scheduler.admission",
    "gpudock.scheduler.backfill",
    "gpudock.scheduler.capacity",
    "gpudock.scheduler.cycle",
    "gpudock.scheduler.equivalence",
    "gpudock.scheduler.explain",
    "gpudock.scheduler.feasibility",
    "gpudock.scheduler.framework",
    "gpudock.scheduler.node_fit",
    "gpudock.scheduler.node_state",
    "gpudock.scheduler.placing",
    "gpudock.scheduler.policies.gpu_picker",
    "gpudock.scheduler.policies.priority_fifo",
    "gpudock.scheduler.policies.share_price.mix",
    "gpudock.scheduler.policies.share_price.pricing",
    "gpudock.scheduler.post_filter",
    "gpudock.scheduler.preemption",
    "gpudock.scheduler.release",
    "gpudock.scheduler.rules",
    "gpudock.scheduler.running",
    "gpudock.scheduler.snapshot",
    "gpudock.scheduler.topology",
    "gpudock.scheduler.victim_sets",
    "gpudock.sim.engine",
    "gpudock.sim.estimate",
    "gpudock.sim.jobs",
    "gpudock.sim.policies",
    "gpudock.sim.priorities",
    "gpudock.sim.state",
    "gpudock.sim.transitions",
)
"""Compiled together as one group (``GPUDOCK_COMPILE=1``). Each is typed (mypy strict);
a class subclassed by interpreted code says so
(``mypyc_attr(allow_interpreted_subclasses=True)``), and a policy stays a plain Python
class with compiled methods (``mypyc_attr(native_class=False)``): on a native class,
``Policy.name`` would be an attribute descriptor and ``__init__`` would lose the
parameter kinds and hints that the registry reads for options."""

MANIFEST = "_native.json"
"""Beside this module: ``{module: sha256 of its source}`` as last compiled."""

PURE_ENV = "GPUDOCK_PURE"

_ROOT = Path(__file__).resolve().parent.parent  # the directory holding ``gpudock``

_state: dict[str, object] = {"reason": "not checked"}


def source_of(module: str, root: Path = _ROOT) -> Path:
    """The ``.py`` file of ``module`` under ``root``."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def digest(path: Path) -> str:
    """SHA-256 of a file's bytes, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def manifest(root: Path = _ROOT) -> dict[str, str]:
    """What ``setup.py`` writes after compiling: each module's source digest."""
    return {m: digest(source_of(m, root)) for m in MODULES}


def _extension_of(module: str) -> bool:
    """True when a compiled extension of ``module`` lies beside its source."""
    source = source_of(module)
    stem = source.with_suffix("").name
    return any(source.with_name(stem + s).is_file() for s in importlib.machinery.EXTENSION_SUFFIXES)


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Finds ``MODULES`` as their ``.py`` files, ahead of any compiled extension."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = frozenset(modules)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        source = source_of(fullname)
        if not source.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def guard() -> None:
    """Load the compiled modules only if all of them match their source; else none.

    Must run before any of ``MODULES`` is imported (``gpudock/__init__`` calls it).
    """
    written = _ROOT / "gpudock" / MANIFEST
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        reason = f"{PURE_ENV} is set"
    elif not written.is_file():
        if not any(_extension_of(m) for m in MODULES):
            _state["reason"] = "not compiled (pure Python build)"
            return
        reason = "compiled modules without a manifest (a stale build; loading the source)"
    else:
        try:
            built = json.loads(written.read_text())
        except (OSError, ValueError):
            built = None
        if built != manifest():
            reason = "a source changed since the build (reinstall to compile again)"
        elif not all(_extension_of(m) for m in MODULES):
            reason = "compiled modules are missing (reinstall to compile again)"
        else:
            _state["reason"] = "compiled"
            return
    _state["reason"] = reason
    if not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst(MODULES))


def compiled() -> bool:
    """True when every module of ``MODULES`` that is loaded came from an extension."""
    loaded = [sys.modules[m] for m in MODULES if m in sys.modules]
    return bool(loaded) and all(
        str(getattr(m, "__file__", "")).endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
        for m in loaded
    )


def describe() -> str:
    """Imports ``MODULES`` and says how they run: ``compiled (mypyc, N modules)`` or
    ``interpreted (why)`` (``gpudock version``)."""
    if build() == "compiled":
        return f"compiled (mypyc, {len(MODULES)} modules)"
    return f"interpreted ({status()})"


def status() -> str:
    """Why the modules are compiled or not, in words (for reports and benchmarks)."""
    return str(_state["reason"])


def build() -> str:
    """``"compiled"`` when ``MODULES`` run compiled, else ``"pure"`` (imports them)."""
    for module in MODULES:
        importlib.import_module(module)
    return "compiled" if compiled() else "pure"
