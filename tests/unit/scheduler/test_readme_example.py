"""The worked example of ``scheduler/README.md`` ("How to add a policy") works as written.

The README's filter module and its tests are read from the README itself: the
filter is registered for the duration of a test, then the README's own tests
run. So the example a newcomer copies cannot drift from the code.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpudock.config import SchedulerConfig
from gpudock.scheduler import registry

from .builders import assert_placed, make_job, make_node, make_snapshot, run

README = Path(__file__).resolve().parents[3] / "src" / "gpudock" / "scheduler" / "README.md"


def _example_blocks() -> list[str]:
    """The Python blocks of the README's "How to add a policy" section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## How to add a policy", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)


BLOCKS = _example_blocks()
MODULE, REGISTRY_LINE, TESTS = BLOCKS[0], BLOCKS[1], BLOCKS[2]


def _run(source: str, filename: str, namespace: dict[str, Any]) -> dict[str, Any]:
    exec(compile(source, filename, "exec"), namespace)
    return namespace


def _readme_tests() -> dict[str, Callable[[], None]]:
    namespace = _run(TESTS, "README.md: test_cordon.py", {"__package__": __package__})
    return {k: v for k, v in namespace.items() if k.startswith("test_")}


@pytest.fixture
def cordon_registered(monkeypatch: pytest.MonkeyPatch) -> type:
    """The README's ``Cordon`` filter, registered as its registry line says."""
    module = _run(MODULE, "README.md: policies/cordon.py", {"__name__": "cordon_example"})
    cordon: type = module["Cordon"]
    assert REGISTRY_LINE.strip() == "Cordon.name: Cordon,"
    monkeypatch.setitem(registry.FILTER_POLICIES, cordon.name, cordon)  # type: ignore[attr-defined]
    return cordon


def test_the_example_has_a_module_a_registry_line_and_tests() -> None:
    assert len(BLOCKS) == 3
    assert len(_readme_tests()) >= 2


@pytest.mark.parametrize("name", sorted(_readme_tests()))
def test_the_readme_test_passes(cordon_registered: type, name: str) -> None:
    _readme_tests()[name]()


def test_without_the_filter_the_cordoned_node_wins_the_tie() -> None:
    nodes = [make_node("n0").gpus(8).label("gpudock.io/cordon", "true"), make_node("n1").gpus(8)]
    plan = run(make_snapshot(nodes, [make_job(1).gpus(2)]))
    assert_placed(plan, 1, node="n0")


def test_an_unregistered_filter_name_is_refused() -> None:
    config = SchedulerConfig.model_validate({"policies": {"filters": ["gpu_capacity", "cordon"]}})
    with pytest.raises(ValueError, match="unknown filter policy 'cordon'"):
        registry.build_profile(config)
