"""Build gpudock: pure Python by default; ``GPUDOCK_COMPILE=1`` compiles with mypyc.

Everything else about the package is in ``pyproject.toml``. A default build
(``GPUDOCK_COMPILE`` unset or ``0``) is pure Python and needs no compiler. With
``GPUDOCK_COMPILE=1`` the modules named in ``src/gpudock/_native.py`` are
compiled from their typed source to C extensions (one mypyc group; needs a C
compiler and the Python headers, e.g. Debian's gcc and python3-dev); after a
successful build ``_native.json`` records the source each was compiled from, so
an edited source is never shadowed by stale compiled code
(``gpudock._native.guard``). A compile that was asked for and cannot run fails
the build, saying why: it never falls back to pure Python silently.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
SRC = HERE / "src"


@functools.cache
def _native() -> Any:
    """``gpudock/_native.py``, loaded by path (the package's dependencies may be absent)."""
    spec = importlib.util.spec_from_file_location("_gpudock_native", SRC / "gpudock" / "_native.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wanted() -> bool:
    """``GPUDOCK_COMPILE``: ``1`` compiles; unset or ``0`` builds pure Python."""
    value = os.environ.get("GPUDOCK_COMPILE", "0")
    if value not in ("0", "1"):
        sys.exit(f"gpudock: GPUDOCK_COMPILE must be 0 or 1, not {value!r}")
    return value == "1"


def _why_not_compile() -> str | None:
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed"
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not include.is_file():
        return f"no Python headers ({include}; on Debian: apt-get install python3-dev)"
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return f"no C compiler ({compiler})"
    return None


class _BuildExt(build_ext):
    """Builds the extensions, then writes the manifest of what they were compiled from."""

    def run(self) -> None:
        super().run()
        native = _native()
        in_source = self.inplace or getattr(self, "editable_mode", False)
        where = SRC if in_source else Path(self.build_lib)
        target = where / "gpudock" / native.MANIFEST
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(native.manifest(SRC), indent=1, sort_keys=True) + "\n")


def _extensions() -> tuple[list[Any], dict[str, Any]]:
    native = _native()
    stale = SRC / "gpudock" / native.MANIFEST
    stale.unlink(missing_ok=True)  # rewritten only by a build that compiled
    if not _wanted():
        print("gpudock: building pure Python (GPUDOCK_COMPILE=1 compiles)", file=sys.stderr)
        return [], {}
    why = _why_not_compile()
    if why is not None:
        sys.exit(f"gpudock: GPUDOCK_COMPILE=1 but cannot compile: {why}")
    from mypyc.build import mypycify

    paths = [str(native.source_of(m, SRC).relative_to(HERE)) for m in native.MODULES]
    extensions = mypycify(paths, opt_level="3", group_name="gpudock_native")  # exits on an error
    return extensions, {"build_ext": _BuildExt}


ext_modules, cmdclass = _extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
