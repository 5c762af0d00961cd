"""Build gpudock; compiles the scheduler's and the simulator's hot modules with mypyc.

Everything else about the package is in ``pyproject.toml``. The modules named in
``src/gpudock/_native.py`` are compiled from their typed source to C extensions
(one mypyc group); after a successful build ``_native.json`` records the source
each was compiled from, so an edited source is never shadowed by stale compiled
code (``gpudock._native.guard``). The build is pure Python, with a line saying
why, when ``GPUDOCK_COMPILE=0`` is set or no C compiler or Python headers are
found.
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


def _why_not_compile() -> str | None:
    if os.environ.get("GPUDOCK_COMPILE", "1") == "0":
        return "GPUDOCK_COMPILE=0"
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
    why = _why_not_compile()
    if why is not None:
        print(f"gpudock: building pure Python: {why}", file=sys.stderr)
        return [], {}
    from mypyc.build import mypycify

    paths = [str(native.source_of(m, SRC).relative_to(HERE)) for m in native.MODULES]
    try:
        extensions = mypycify(paths, opt_level="3", group_name="gpudock_native")
    except (Exception, SystemExit) as error:  # mypyc exits on a type error
        print(f"gpudock: building pure Python: mypyc failed ({error})", file=sys.stderr)
        return [], {}
    return extensions, {"build_ext": _BuildExt}


ext_modules, cmdclass = _extensions()
setup(ext_modules=ext_modules, cmdclass=cmdclass)
