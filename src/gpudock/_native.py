"""The scheduler's and the simulator's hot modules, compiled with mypyc when built so.

``setup.py`` compiles the modules in ``MODULES`` to C extensions (mypyc, from the
same typed source; ``GPUDOCK_COMPILE=0`` builds pure Python) and, once the build
succeeds, writes ``MANIFEST``: the SHA-256 of each module's source as compiled.
Python imports an extension module ahead of the ``.py`` beside it, so a source
edited after the build would be shadowed by stale compiled code. ``guard``,
called by ``gpudock/__init__``, prevents that: unless every listed source still
matches the manifest, it makes all of ``MODULES`` load from their ``.py`` files
(all of them, since compiled modules call each other directly, not through the
module objects). ``GPUDOCK_PURE=1`` does the same on purpose.

This module imports only the standard library: ``setup.py`` reads it at build time.
"""

from __future__ import annotations

import dataclasses
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
from types import FunctionType, ModuleType
from typing import TypeVar

MODULES: tuple[str, ...] = (
    "gpudock.scheduler.admission",
    "gpudock.scheduler.backfill",
    "gpudock.scheduler.boards",
    "gpudock.scheduler.capacity",
    "gpudock.scheduler.catalog",
    "gpudock.scheduler.cycle",
    "gpudock.scheduler.equivalence",
    "gpudock.scheduler.explain",
    "gpudock.scheduler.feasibility",
    "gpudock.scheduler.framework",
    "gpudock.scheduler.index",
    "gpudock.scheduler.indexed",
    "gpudock.scheduler.placing",
    "gpudock.scheduler.policies.gpu_picker",
    "gpudock.scheduler.policies.priority_fifo",
    "gpudock.scheduler.preemption",
    "gpudock.scheduler.pricing",
    "gpudock.scheduler.release",
    "gpudock.scheduler.running",
    "gpudock.scheduler.snapshot",
    "gpudock.scheduler.topology",
    "gpudock.scheduler.victims",
    "gpudock.sim.engine",
    "gpudock.sim.estimate",
    "gpudock.sim.policies",
)
"""Compiled together as one group. Each is typed (mypy strict); a class subclassed
by interpreted code says so (``mypyc_attr(allow_interpreted_subclasses=True)``), and
a policy, whose class attributes the registry reads, stays a plain Python class
with compiled methods (``mypyc_attr(native_class=False)``)."""

MANIFEST = "_native.json"
"""Beside this module: ``{module: sha256 of its source}`` as last compiled."""

PURE_ENV = "GPUDOCK_PURE"

_ROOT = Path(__file__).resolve().parent.parent  # the directory holding ``gpudock``

_state: dict[str, object] = {"reason": "not checked"}

_T = TypeVar("_T")


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
        _state["reason"] = "not compiled (pure Python build)"
        return
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
    for module in MODULES:
        importlib.import_module(module)
    if compiled():
        return f"compiled (mypyc, {len(MODULES)} modules)"
    return f"interpreted ({status()})"


def status() -> str:
    """Why the modules are compiled or not, in words (for reports and benchmarks)."""
    return str(_state["reason"])


def frozen_init(cls: type[_T]) -> type[_T]:
    """Make a frozen dataclass's own ``__init__`` work when it runs interpreted.

    A dataclass's generated methods stay interpreted even in a compiled build
    (mypyc leaves them to the ``dataclasses`` module), and a frozen one's
    ``__init__`` stores each field through ``object.__setattr__``: 3-4 µs for a
    ``RunningJob``, made over a million times in a long replay. The hot frozen
    snapshot types therefore define ``__init__`` themselves, assigning each
    parameter to the field of its name (``self.x = x``, one per field, in field
    order, nothing else). Compiled, those are native stores that the frozen
    ``__setattr__`` never sees (about 0.4 µs for a whole ``RunningJob``). Interpreted, they would
    raise ``FrozenInstanceError``; there this replaces that ``__init__`` with one
    of the same parameters and defaults that stores through
    ``object.__setattr__``, as dataclasses' own does.

    Raises TypeError when the ``__init__``'s parameters are not the fields, in
    order (checked where it runs interpreted: a compiled ``__init__`` is left as
    it is, and ``tests/unit/test_native.py`` checks its signature).
    """
    init = cls.__dict__["__init__"]
    if not isinstance(init, FunctionType):
        return cls  # compiled: a native method, whose stores are native
    names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    code = init.__code__
    if code.co_varnames[1 : code.co_argcount] != names or code.co_kwonlyargcount:
        raise TypeError(f"{cls.__qualname__}.__init__ must take exactly its fields {names}")
    body = "".join(f"    _set(self, {name!r}, {name})\n" for name in names)
    namespace: dict[str, object] = {"_set": object.__setattr__}
    exec(f"def __init__(self, {', '.join(names)}):\n{body}", namespace)
    stored = namespace["__init__"]
    assert isinstance(stored, FunctionType)
    stored.__defaults__ = init.__defaults__
    stored.__qualname__ = init.__qualname__
    stored.__module__ = init.__module__
    stored.__doc__ = init.__doc__
    stored.__annotations__ = init.__annotations__
    setattr(cls, "__init__", stored)  # noqa: B010 (mypy refuses assigning a method)
    return cls
