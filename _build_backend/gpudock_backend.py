"""gpudock's build backend: setuptools, asking for mypyc's tools only when compiling.

A default install is pure Python and needs nothing but setuptools (no compiler,
no mypy). ``GPUDOCK_COMPILE=1`` compiles the scheduler's and the simulator's hot
modules with mypyc (``setup.py``); only then does the build ask for mypy and the
typed libraries that mypy reads while compiling (``COMPILE_REQUIRES``, the same
pins as ``pyproject.toml``).
"""

from __future__ import annotations

import os
from typing import Any

COMPILE_REQUIRES = (
    "mypy==2.4.1",
    "pydantic==2.14.4",
    "types-PyYAML==6.0.12.20261122",
    "numpy==2.4.6",
)


def _compile_requires() -> list[str]:
    return list(COMPILE_REQUIRES) if os.environ.get("GPUDOCK_COMPILE", "0") == "1" else []


# Not setuptools' own: those run setup.py, which must not run before mypyc is installed.
# ``setup.py`` declares no ``setup_requires``, so setuptools would add nothing here.


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return _compile_requires()


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    return _compile_requires()


def __getattr__(name: str) -> Any:
    """Every other hook is setuptools' own (imported on first use)."""
    from setuptools import build_meta

    return getattr(build_meta, name)
