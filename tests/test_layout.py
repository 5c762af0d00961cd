"""The test tree collects: no two rootdir-imported test modules share a basename.

pytest imports a test file outside a package (a folder without ``__init__.py``)
as a top-level module named after its file, so two such files with one name
break collection of the whole suite ("import file mismatch").
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent


def in_package(path: Path) -> bool:
    return (path.parent / "__init__.py").exists()


def test_no_two_top_level_test_modules_share_a_name() -> None:
    by_name: defaultdict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        if not in_package(path) and (path.name.startswith("test_") or path.name == "conftest.py"):
            by_name[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    clashes.pop("conftest.py", None)  # pytest registers conftests by path
    assert clashes == {}, f"rename one of each: {clashes}"
