"""Plan parity: a fixed set of scenarios gives the very Plans recorded in ``plan_parity.json``.

The golden file was written by the scheduler before a refactor that must
not change any decision (``parity_cases.py`` says what the cases cover). It
holds a digest of every case's canonical Plan data and, for a few cases,
the data itself, so a failure there shows what changed.

A change that is *meant* to change Plans regenerates the file, and the diff
of its digests shows which cases moved::

    GPUDOCK_WRITE_PARITY=1 .venv/bin/python -m pytest tests/unit/scheduler/test_plan_parity.py -q
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .parity_cases import cases, digest

GOLDEN = Path(__file__).with_name("plan_parity.json")
SHOWN = ("random-1-queues", "random-3-default", "strict-0")


def replay() -> tuple[dict[str, str], dict[str, object]]:
    digests: dict[str, str] = {}
    shown: dict[str, object] = {}
    for name, run in cases():
        data = run()
        digests[name] = digest(data)
        if name in SHOWN:
            shown[name] = data
    return digests, shown


def test_every_plan_is_the_recorded_one() -> None:
    digests, shown = replay()
    if os.environ.get("GPUDOCK_WRITE_PARITY") == "1":
        GOLDEN.write_text(json.dumps({"digests": digests, "plans": shown}, indent=1) + "\n")
        pytest.skip(f"wrote {GOLDEN.name} ({len(digests)} cases)")
    golden = json.loads(GOLDEN.read_text())
    for name, data in shown.items():  # full Plans first: the clearest diff
        assert json.loads(json.dumps(data)) == golden["plans"][name], name
    changed = sorted(
        name for name in golden["digests"] if digests.get(name) != golden["digests"][name]
    )
    assert not changed, f"{len(changed)} of {len(golden['digests'])} cases changed: {changed}"
    assert digests.keys() == golden["digests"].keys()
